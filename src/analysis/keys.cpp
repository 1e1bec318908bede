// config.json keys -> understood / irrelevant / unrecognised (keys.h). Three tables: what each
// understood key changes, why each irrelevant key does not matter to inference, and the enum
// values the analysis knows per key (plus those a proof in evidence.cpp names as "KEY=VALUE").
// A key in none of them is unrecognised and goes to the register with its value.
#include "analysis/keys.h"

#include <algorithm>
#include <map>

#include "analysis/evidence.h"
#include "core/json.h"

namespace dayzero::analysis {
namespace {

struct Entry {
  const char* key;
  const char* what;
};

// Keys the analysis (dims.cpp, layouts.cpp, provenance.cpp) or an adapter reads, and what they
// change. "numerics" keys change values, not shapes or counts.
const Entry kUnderstood[] = {
    {"model_type", "selects the config class (defaults), the layout rules and the adapter"},
    {"architectures", "adapter lookup when model_type has none"},
    {"vocab_size", "embedding and lm_head rows"},
    {"hidden_size", "width of the residual stream (every matrix)"},
    {"n_embed", "hidden_size (bloom's name)"},
    {"n_embd", "hidden_size (older name)"},
    {"num_hidden_layers", "decoder layer count"},
    {"n_layer", "num_hidden_layers (older name)"},
    {"num_attention_heads", "query heads"},
    {"n_head", "num_attention_heads (older name)"},
    {"num_key_value_heads", "key/value heads (GQA / MQA)"},
    {"n_head_kv", "key/value heads (Falcon remote code)"},
    {"num_kv_heads", "key/value heads (falcon)"},
    {"multi_query", "one key/value head (falcon)"},
    {"new_decoder_architecture", "falcon's grouped key/value heads and two norms"},
    {"parallel_attn", "attention and MLP in parallel from one residual (falcon)"},
    {"num_ln_in_parallel_attn", "norms before the parallel branches (falcon)"},
    {"bias", "biases on every Linear (falcon)"},
    {"head_dim", "per-head width"},
    {"kv_channels", "per-head width (Qwen remote code)"},
    {"intermediate_size", "dense MLP width (or the experts' where the family says so)"},
    {"ffn_hidden_size", "MLP width (falcon)"},
    {"intermediate_size_mlp", "dense MLP width of non-MoE layers (llama4)"},
    {"max_position_embeddings", "longest context (cache sizing in the plan)"},
    {"seq_length", "longest context (Qwen remote code)"},
    {"tie_word_embeddings", "lm_head shares the embedding (no lm_head tensor)"},
    {"attention_bias", "q/k/v (and o) projection biases"},
    {"qkv_bias", "q/k/v projection biases (qwen2_moe)"},
    {"no_bias", "no bias on c_proj (Qwen remote code)"},
    {"mlp_bias", "MLP biases"},
    {"lm_head_bias", "lm_head bias"},
    {"attn_output_gate", "sigmoid output gate (q_proj doubled)"},
    {"use_qk_norm", "q/k norm"},
    {"num_local_experts", "routed experts"},
    {"num_experts", "routed experts"},
    {"n_routed_experts", "routed experts"},
    {"num_experts_per_tok", "experts per token (activated count)"},
    {"num_experts_per_token", "experts per token (activated count)"},
    {"experts_per_token", "experts per token (gpt-oss's second name)"},
    {"moe_topk", "experts per token"},
    {"moe_intermediate_size", "routed expert width"},
    {"n_shared_experts", "shared experts per MoE layer"},
    {"num_shared_experts", "shared experts per MoE layer"},
    {"mamba_ssm_dtype", "numerics: dtype of the linear-attention recurrent state"},
    {"moe_renormalize", "numerics: top-k weights renormalised"},
    {"num_expert_group", "grouped expert selection (numerics of the router)"},
    {"shared_expert_intermediate_size", "gated shared expert width"},
    {"first_k_dense_replace", "leading dense layers"},
    {"moe_layer_freq", "which layers are MoE"},
    {"decoder_sparse_step", "which layers are MoE"},
    {"interleave_moe_layer_step", "which layers are MoE (llama4)"},
    {"mlp_only_layers", "layers kept dense"},
    {"mlp_layer_types", "per-layer feed-forward kind (dense or MoE)"},
    {"scoring_func", "router score function"},
    {"topk_method", "expert selection rule"},
    {"norm_topk_prob", "numerics: top-k weights renormalised"},
    {"routed_scaling_factor", "numerics: routed output scale"},
    {"n_group", "grouped expert selection (numerics of the router)"},
    {"topk_group", "grouped expert selection (numerics of the router)"},
    {"kv_lora_rank", "MLA latent width"},
    {"q_lora_rank", "MLA query low-rank width"},
    {"qk_nope_head_dim", "MLA per-head width without rotary"},
    {"qk_rope_head_dim", "MLA per-head rotary width"},
    {"v_head_dim", "MLA per-head value width"},
    {"qk_head_dim", "MLA per-head q/k width (nope + rope)"},
    {"rope_interleave", "rotary pairs interleaved (MLA)"},
    {"index_topk", "sparse-attention indexer: keys kept per query"},
    {"index_n_heads", "indexer heads"},
    {"index_head_dim", "indexer head width"},
    {"indexer_types", "which layers reuse the previous indexer selection"},
    {"index_topk_pattern", "which layers reuse the previous indexer selection"},
    {"index_topk_freq", "which layers reuse the previous indexer selection"},
    {"indexer_rope_interleave", "indexer rotary layout"},
    {"layer_types", "per-layer attention kind"},
    {"full_attention_interval", "every n-th layer full attention (hybrid)"},
    {"linear_num_key_heads", "Gated DeltaNet key heads"},
    {"linear_num_value_heads", "Gated DeltaNet value heads"},
    {"linear_key_head_dim", "Gated DeltaNet key width"},
    {"linear_value_head_dim", "Gated DeltaNet value width"},
    {"linear_conv_kernel_dim", "linear-attention causal convolution width"},
    {"use_sliding_window", "sliding window on or off"},
    {"sliding_window", "sliding-window length"},
    {"max_window_layers", "layers below this use the sliding window (with use_sliding_window)"},
    {"rope_scaling", "RoPE scaling (its keys accounted below)"},
    {"rope_parameters", "RoPE parameters (its keys accounted below)"},
    {"rope_theta", "numerics: RoPE base"},
    {"rotary_emb_base", "numerics: RoPE base (Qwen remote code)"},
    {"partial_rotary_factor", "fraction of head_dim rotated"},
    {"rotary_pct", "fraction of head_dim rotated (Qwen remote code)"},
    {"num_nextn_predict_layers", "MTP layers (counted apart, never run)"},
    {"mtp_num_hidden_layers", "MTP layers (counted apart, never run)"},
    {"hidden_act", "MLP activation"},
    {"hidden_activation", "MLP activation (gemma's name)"},
    {"projector_hidden_act", "projector activation"},
    {"projector_ln_eps", "numerics: projector norm epsilon"},
    {"mm_hidden_size", "projector input width (MoonViT)"},
    {"pixel_shuffle_ratio", "pixel-shuffle adapter ratio (its sizes read from projector_input_dim / projector_output_dim)"},
    {"multi_modal_projector_bias", "projector biases (llama4: only false is the modelled layout)"},
    {"scale_attn_weights", "attention scores scaled by 1/sqrt(head_dim) (only true is the modelled scale)"},
    {"original_max_position_embeddings", "numerics: the context RoPE scaling starts from"},
    {"initial_context_length", "numerics: the context YaRN starts from (gpt-oss)"},
    {"rms_norm_eps", "numerics: norm epsilon"},
    {"layer_norm_epsilon", "numerics: norm epsilon"},
    {"layer_norm_eps", "numerics: norm epsilon"},
    {"norm_eps", "numerics: norm epsilon"},
    {"torch_dtype", "dtype of the weights (bytes)"},
    {"dtype", "dtype of the weights (bytes)"},
    {"quantization_config", "stored weight format (bytes, scale tensors)"},
    {"text_config", "the text model (its keys accounted as text_config.*)"},
    {"vision_config", "the vision tower (its keys accounted as vision_config.*)"},
    {"audio_config", "an audio tower (needs a new block)"},
    {"transformers_version", "which defaults table applies"},
    {"auto_map", "remote code the folder defines"},
    {"padded_vocab_size", "embedding rows (Qwen remote code)"},
    // vision towers (vision_config.*)
    {"patch_size", "patch embedding size and positions"},
    {"spatial_patch_size", "patch size (Qwen-VL)"},
    {"image_size", "position table length"},
    {"num_channels", "patch embedding input channels"},
    {"in_channels", "patch embedding input channels"},
    {"in_chans", "patch embedding input channels"},
    {"depth", "tower layers"},
    {"embed_dim", "tower width (Qwen2-VL)"},
    {"mlp_ratio", "tower MLP width / embed_dim"},
    {"num_heads", "tower heads"},
    {"temporal_patch_size", "patch embedding frames"},
    {"spatial_merge_size", "merger patch grouping"},
    {"merge_kernel_size", "merger patch grouping (MoonViT)"},
    {"out_hidden_size", "merger output width"},
    {"text_hidden_size", "projector output width"},
    {"vt_hidden_size", "tower width (MoonViT)"},
    {"vt_intermediate_size", "tower MLP width (MoonViT)"},
    {"vt_num_hidden_layers", "tower layers (MoonViT)"},
    {"vt_num_attention_heads", "tower heads (MoonViT)"},
    {"init_pos_emb_height", "position table rows (MoonViT)"},
    {"init_pos_emb_width", "position table columns (MoonViT)"},
    {"num_position_embeddings", "position table length"},
    {"projector_input_dim", "pixel-shuffle adapter input (llama4)"},
    {"projector_output_dim", "pixel-shuffle adapter output (llama4)"},
    {"vision_output_dim", "projector input width (llama4)"},
    {"vision_feature_layer", "which tower layer feeds the projector (all layers counted)"},
    {"vision_feature_select_strategy", "which tower outputs feed the projector (class token or not)"},
};

// Keys that do not change what inference computes, and why.
const Entry kIrrelevant[] = {
    {"router_aux_loss_coef", "training loss weight"},
    {"aux_loss_alpha", "training loss weight"},
    {"seq_aux", "training loss option"},
    {"output_router_logits", "training output (router loss)"},
    {"router_jitter_noise", "training noise on the router"},
    {"input_jitter_noise", "training noise on the input"},
    {"initializer_range", "weight initialisation (training)"},
    {"attention_dropout", "dropout (training)"},
    {"hidden_dropout", "dropout (training)"},
    {"embd_pdrop", "dropout (training)"},
    {"resid_pdrop", "dropout (training)"},
    {"attn_dropout_prob", "dropout (training)"},
    {"emb_dropout_prob", "dropout (training)"},
    {"expert_dropout", "dropout (training)"},
    {"projector_dropout", "dropout (training)"},
    {"ep_size", "expert-parallel degree of the original deployment (not the model)"},
    {"pretraining_tp", "tensor-parallel degree used in pretraining (slices the same matmul)"},
    {"use_cache", "transformers' cache switch (dayzero keeps its own cache)"},
    {"_name_or_path", "where the config was saved from"},
    {"_attn_implementation", "transformers' attention backend choice"},
    {"use_flash_attn", "kernel choice of the remote code (same softmax attention)"},
    {"tokenizer_class", "tokenizer, not the model"},
    {"tokenizer_type", "tokenizer, not the model"},
    {"bos_token_id", "token ids (tokenizer and generation)"},
    {"eos_token_id", "token ids (tokenizer and generation)"},
    {"pad_token_id", "token ids (tokenizer and generation)"},
    {"sep_token_id", "token ids (tokenizer and generation)"},
    {"decoder_start_token_id", "token ids (tokenizer and generation)"},
    {"forced_bos_token_id", "generation option"},
    {"forced_eos_token_id", "generation option"},
    {"image_token_index", "placeholder token id (prompt building)"},
    {"image_token_id", "placeholder token id (prompt building)"},
    {"boi_token_index", "placeholder token id (prompt building)"},
    {"eoi_token_index", "placeholder token id (prompt building)"},
    {"vision_start_token_id", "placeholder token id (prompt building)"},
    {"vision_end_token_id", "placeholder token id (prompt building)"},
    {"vision_token_id", "placeholder token id (prompt building)"},
    {"video_token_id", "placeholder token id (prompt building)"},
    {"media_placeholder_token_id", "placeholder token id (prompt building)"},
    {"video_placeholder", "placeholder text (prompt building)"},
    {"mm_tokens_per_image", "tokens per image (prompt building; the processor's)"},
    {"ignore_index", "label value ignored by the training loss"},
    {"model_max_length", "tokenizer's length limit"},
    // PretrainedConfig's generation and output defaults (older configs write them out)
    {"temperature", "generation default"},
    {"top_p", "generation default"},
    {"top_k", "generation default"},
    {"typical_p", "generation default"},
    {"repetition_penalty", "generation default"},
    {"length_penalty", "generation default"},
    {"no_repeat_ngram_size", "generation default"},
    {"encoder_no_repeat_ngram_size", "generation default"},
    {"bad_words_ids", "generation default"},
    {"num_return_sequences", "generation default"},
    {"num_beams", "generation default"},
    {"num_beam_groups", "generation default"},
    {"diversity_penalty", "generation default"},
    {"do_sample", "generation default"},
    {"early_stopping", "generation default"},
    {"max_length", "generation default"},
    {"min_length", "generation default"},
    {"exponential_decay_length_penalty", "generation default"},
    {"suppress_tokens", "generation default"},
    {"begin_suppress_tokens", "generation default"},
    {"remove_invalid_values", "generation default"},
    {"output_scores", "generation output option"},
    {"return_dict_in_generate", "generation output option"},
    {"return_dict", "output format option"},
    {"output_hidden_states", "output option"},
    {"output_attentions", "output option"},
    {"torchscript", "export option"},
    {"onnx_safe", "export option"},
    {"use_bfloat16", "legacy dtype flag (torch_dtype is read)"},
    {"bf16", "compute dtype flag of the remote code (torch_dtype is read)"},
    {"fp16", "compute dtype flag of the remote code (torch_dtype is read)"},
    {"fp32", "compute dtype flag of the remote code (torch_dtype is read)"},
    {"params_dtype", "training dtype (torch_dtype is read)"},
    {"tie_encoder_decoder", "encoder-decoder option (decoder-only model)"},
    {"is_decoder", "encoder-decoder option (decoder-only model)"},
    {"is_encoder_decoder", "encoder-decoder option (decoder-only model)"},
    {"add_cross_attention", "encoder-decoder option (decoder-only model)"},
    {"cross_attention_hidden_size", "encoder-decoder option (decoder-only model)"},
    {"chunk_size_feed_forward", "memory option (same result)"},
    {"pruned_heads", "training bookkeeping"},
    {"tf_legacy_loss", "training loss option"},
    {"problem_type", "classification heads"},
    {"id2label", "classification heads"},
    {"label2id", "classification heads"},
    {"finetuning_task", "training bookkeeping"},
    {"prefix", "generation prompt prefix"},
    {"task_specific_params", "pipelines' options"},
    {"masked_softmax_fusion", "training kernel choice (bloom)"},
    {"slow_but_exact", "training parallelism option (bloom)"},
    {"softmax_in_fp32", "softmax precision (dayzero's softmax is f32)"},
    {"attention_softmax_in_fp32", "softmax precision (dayzero's softmax is f32)"},
    {"mtp_use_dedicated_embeddings", "MTP option (MTP layers are never run)"},
    {"projection_dim", "contrastive head of a CLIP-style tower (not used by the projector)"},
};

// Keys that name a feature no estimate rule models; the feature is listed "needs review" unless
// a proof covers it. params: it has parameters the estimate leaves out.
struct FeatureKey {
  const char* key;
  const char* feature;
  const char* what;
  bool params;
};
const FeatureKey kFeatureKeys[] = {
    {"hc_mult", "hyper-connections", "residual kept as hc_mult streams mixed in and out of each block", true},
    {"hc_sinkhorn_iters", "hyper-connections", "Sinkhorn iterations of the stream-mixing weights", false},
    {"hc_eps", "hyper-connections", "epsilon of the stream-mixing weights", false},
    {"compress_rates", "compressed KV attention", "tokens per compressed KV entry per layer kind", true},
    {"compress_rope_theta", "compressed KV attention", "RoPE base of the compressed entries", false},
    {"o_groups", "grouped output projection", "attention output projected per head group, then mixed", true},
    {"o_lora_rank", "grouped output projection", "width of each group's low-rank output", true},
    {"swiglu_limit", "clamped SwiGLU", "gate and up projections clamped before the activation", false},
    {"attention_chunk_size", "chunked attention", "attention within fixed chunks", false},
    {"final_logit_softcapping", "soft-capping", "tanh soft-capping of the logits", false},
    {"attn_logit_softcapping", "soft-capping", "tanh soft-capping of the attention scores", false},
    {"query_pre_attn_scalar", "attention scale from query_pre_attn_scalar", "attention scaled by 1/sqrt(value)", false},
    {"rope_local_base_freq", "local RoPE base", "another RoPE base on the sliding layers", false},
    {"embedding_multiplier", "scaling multipliers", "embedding output scaled", false},
    {"residual_multiplier", "scaling multipliers", "residual branches scaled", false},
    {"attention_multiplier", "scaling multipliers", "attention scale replaced", false},
    {"logits_scaling", "scaling multipliers", "logits divided", false},
    {"use_logn_attn", "log-n attention scaling", "queries scaled by log position beyond the trained length", false},
    {"use_dynamic_ntk", "dynamic NTK RoPE", "RoPE base grown with the context", false},
    {"use_cache_quantization", "quantized KV cache", "the remote code's int8 KV cache", false},
    {"use_cache_kernel", "quantized KV cache", "the remote code's int8 KV cache kernels", false},
    {"apply_residual_connection_post_layernorm", "residual from the normed input",
     "the residual taken after the norm (bloom)", false},
    {"use_mrope", "multimodal RoPE (M-RoPE)", "3-D rotary positions", false},
    {"deepstack_visual_indexes", "deepstack visual features", "tower layers added into text layers", true},
    {"vision_use_head", "vision pooling head", "a pooling head on the tower", true},
    {"linear_num_heads", "linear attention (Kimi Delta Attention)", "KDA heads", true},
    {"linear_head_dim", "linear attention (Kimi Delta Attention)", "KDA head width", true},
};

// Enum keys and the values the analysis knows (what each value means is read in dims.cpp).
struct EnumKey {
  const char* key;
  std::vector<const char*> values;
};
const EnumKey kEnums[] = {
    {"scoring_func", {"softmax", "sigmoid", "sqrtsoftplus"}},
    {"topk_method", {"greedy", "noaux_tc", "group_limited_greedy"}},
    // deepseek_v4's two compressed kinds: their tensors are counted (tensors.cpp) with compress_rates
    {"layer_types", {"full_attention", "linear_attention", "sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention"}},
    {"mlp_layer_types", {"dense", "sparse", "moe", "hash_moe"}},
    {"hidden_act", {"silu", "swish", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"}},
    {"hidden_activation", {"silu", "swish", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"}},
    {"rope_type", {"default", "linear", "dynamic", "yarn", "llama3", "longrope"}},
    {"type", {"default", "linear", "dynamic", "yarn", "llama3", "longrope", "mrope"}},
    {"multi_modal_projector_bias", {"false"}},
    {"scale_attn_weights", {"true"}},
};

const Entry kRopeKeys[] = {
    {"rope_type", "RoPE scaling type"},
    {"type", "RoPE scaling type (older name)"},
    {"factor", "RoPE scaling factor"},
    {"original_max_position_embeddings", "numerics: YaRN / llama3 base context"},
    {"beta_fast", "numerics: YaRN ramp"},
    {"beta_slow", "numerics: YaRN ramp"},
    {"mscale", "numerics: YaRN attention scale"},
    {"mscale_all_dim", "numerics: YaRN attention scale"},
    {"attention_factor", "numerics: attention scale"},
    {"low_freq_factor", "numerics: llama3 frequency bands"},
    {"high_freq_factor", "numerics: llama3 frequency bands"},
    {"short_factor", "numerics: longrope factors"},
    {"long_factor", "numerics: longrope factors"},
    {"truncate", "numerics: YaRN truncation"},
    {"rope_theta", "numerics: RoPE base"},
    {"partial_rotary_factor", "fraction of head_dim rotated"},
    {"mrope_section", "M-RoPE sections (needs a new block)"},
    {"mrope_interleaved", "M-RoPE layout (needs a new block)"},
    {"main", "RoPE of the sliding layers (deepseek_v4: per-layer-kind RoPE; numerics)"},
    {"compress", "RoPE of the compressed layers and their compressors (deepseek_v4; numerics)"},
};

const char* find(const Entry* begin, const Entry* end, const std::string& key) {
  for (const Entry* e = begin; e != end; ++e)
    if (key == e->key) return e->what;
  return nullptr;
}

const FeatureKey* feature_key(const std::string& key) {
  for (const FeatureKey& f : kFeatureKeys)
    if (key == f.key) return &f;
  return nullptr;
}

bool known_value(const std::string& key, const std::string& value) {
  for (const EnumKey& e : kEnums)
    if (key == e.key)
      for (const char* v : e.values)
        if (value == v) return true;
  return !proofs_of(key + "=" + value).empty();
}

bool is_enum(const std::string& key) {
  return std::any_of(std::begin(kEnums), std::end(kEnums), [&](const EnumKey& e) { return key == e.key; });
}

// A value is "set" when it turns its feature on: not null, false, zero or empty.
bool active(const nlohmann::json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

void account_section(const nlohmann::json& s, const std::string& prefix, std::vector<KeyAccount>& out) {
  for (const auto& [key, v] : s.items()) {
    KeyAccount a;
    a.key = prefix + key;
    a.value = json_excerpt(v, 60);
    const std::vector<std::pair<std::string, int>> unknown = unknown_enum_values(s, key);
    if (!unknown.empty()) {
      std::string vals;
      for (const auto& [val, n] : unknown) vals += (vals.empty() ? "'" : ", '") + val + "'" + (n > 1 ? " x" + std::to_string(n) : "");
      a.cls = KeyClass::kUnrecognised;
      a.what = "value " + vals + " not known to the analysis (not read as the nearest known one)";
    } else if (const char* w = find(std::begin(kUnderstood), std::end(kUnderstood), key)) {
      a.cls = KeyClass::kUnderstood;
      a.what = w;
    } else if (const FeatureKey* f = feature_key(key)) {
      a.cls = KeyClass::kUnderstood;
      a.what = std::string(f->what) + ": feature '" + f->feature + "'" +
               (active(v) ? std::string(f->params ? " (its parameters: see the estimate's notes)" : "") : " (off)");
    } else if (const char* w = find(std::begin(kIrrelevant), std::end(kIrrelevant), key)) {
      a.cls = KeyClass::kIrrelevant;
      a.what = w;
    } else {
      a.cls = KeyClass::kUnrecognised;
      a.what = "no rule of the analysis reads this key";
    }
    out.push_back(std::move(a));
    const bool rope = key == "rope_scaling" || key == "rope_parameters";
    if (rope && v.is_object())
      for (const auto& [rk, rv] : v.items()) {
        KeyAccount r;
        r.key = prefix + key + "." + rk;
        r.value = json_excerpt(rv, 60);
        const bool enum_key = rk == "rope_type" || rk == "type";
        if (enum_key && rv.is_string() && !known_value(rk, rv.get<std::string>())) {
          r.cls = KeyClass::kUnrecognised;
          r.what = "value '" + rv.get<std::string>() + "' not known to the analysis";
        } else if (const char* w = find(std::begin(kRopeKeys), std::end(kRopeKeys), rk)) {
          r.cls = KeyClass::kUnderstood;
          r.what = w;
        } else {
          r.cls = KeyClass::kUnrecognised;
          r.what = rv.is_object() ? "a nested RoPE section no rule reads (per-layer-kind RoPE?)" : "no rule of the analysis reads this key";
        }
        out.push_back(std::move(r));
      }
  }
}

}  // namespace

const char* key_class_name(KeyClass c) {
  switch (c) {
    case KeyClass::kUnderstood: return "understood";
    case KeyClass::kIrrelevant: return "irrelevant";
    case KeyClass::kUnrecognised: return "unrecognised";
  }
  return "?";
}

std::vector<std::pair<std::string, int>> unknown_enum_values(const nlohmann::json& section, const std::string& key) {
  std::vector<std::pair<std::string, int>> out;
  if (!is_enum(key) || !section.is_object() || !section.contains(key)) return out;
  const nlohmann::json& v = section[key];
  const auto add = [&](const nlohmann::json& x) {
    if (!x.is_string() && !x.is_boolean()) return;
    const std::string s = x.is_string() ? x.get<std::string>() : x.dump();
    if (known_value(key, s)) return;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == s; });
    if (it == out.end()) out.push_back({s, 1});
    else it->second += 1;
  };
  if (v.is_array()) for (const auto& x : v) add(x);
  else add(v);
  return out;
}

std::vector<KeyAccount> account_keys(const nlohmann::json& config) {
  std::vector<KeyAccount> out;
  if (!config.is_object()) return out;
  account_section(config, "", out);
  for (const char* sub : {"text_config", "vision_config"})
    if (config.contains(sub) && config[sub].is_object()) account_section(config[sub], std::string(sub) + ".", out);
  return out;
}

std::vector<KeyFeature> key_features(const nlohmann::json& config) {
  std::vector<KeyFeature> out;
  if (!config.is_object()) return out;
  const auto scan = [&](const nlohmann::json& s, const std::string& prefix) {
    for (const auto& [key, v] : s.items()) {
      const FeatureKey* f = feature_key(key);
      if (!f || !active(v)) continue;
      auto it = std::find_if(out.begin(), out.end(), [&](const KeyFeature& k) { return k.feature == f->feature; });
      const std::string detail = std::string(f->what) + " (" + key + " " + json_excerpt(v, 40) + ")";
      if (it == out.end()) out.push_back({f->feature, prefix + key, detail, f->params});
      else it->key += ", " + prefix + key, it->detail += "; " + detail, it->params = it->params || f->params;
    }
  };
  scan(config, "");
  for (const char* sub : {"text_config", "vision_config"})
    if (config.contains(sub) && config[sub].is_object()) scan(config[sub], std::string(sub) + ".");
  return out;
}

}  // namespace dayzero::analysis
