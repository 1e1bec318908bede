// config.json -> ModelDims (analysis.h): the text decoder's sizes under every spelling the
// published families use, the nested vision config, quantization; what the file leaves out comes
// from the config classes' defaults (defaults.h), each key's origin recorded. Wrong types are refused by
// the checked helpers of model/hparams.h, naming the key.
#include <algorithm>
#include <utility>

#include "analysis/analysis.h"
#include "model/layer_desc.h"
#include "model/dsa_config.h"
#include "model/hparams.h"

namespace dayzero::analysis {
namespace {

using model::json_bool_or;
using model::json_double_or;
using model::json_int_or;
using model::json_string_or;

// The first of keys present (non-null) in j, read as an integer; fallback when none is.
Result<int64_t> first_int(const nlohmann::json& j, std::initializer_list<const char*> keys, int64_t fallback) {
  for (const char* k : keys)
    if (j.contains(k) && !j[k].is_null()) return json_int_or(j, k, fallback);
  return fallback;
}

Result<std::vector<std::string>> string_list(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_array()) return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be a list");
  for (const auto& v : j[key]) {
    if (!v.is_string())
      return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be a list of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

Status read_rope(const nlohmann::json& t, TextDims& x) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!t.contains(key) || !t[key].is_object()) continue;
    const auto& r = t[key];
    DZ_ASSIGN_OR_RETURN(std::string type, json_string_or(r, "rope_type", ""));
    if (type.empty()) {
      DZ_ASSIGN_OR_RETURN(type, json_string_or(r, "type", "default"));
    }
    x.rope_type = type;
    DZ_ASSIGN_OR_RETURN(x.rope_factor, json_double_or(r, "factor", 1.0));
    DZ_ASSIGN_OR_RETURN(x.partial_rotary, json_double_or(r, "partial_rotary_factor", x.partial_rotary));
    if (r.contains("mrope_section") && !r["mrope_section"].is_null()) x.mrope = true;
  }
  DZ_ASSIGN_OR_RETURN(x.partial_rotary, json_double_or(t, "partial_rotary_factor", x.partial_rotary));
  return Status::Ok();
}

Status read_text(const nlohmann::json& t, bool nested, TextDims& x) {
  // t already holds the config class's defaults for what the file leaves out (defaults.h).
  DZ_ASSIGN_OR_RETURN(x.model_type, json_string_or(t, "model_type", ""));
  DZ_ASSIGN_OR_RETURN(x.vocab, json_int_or(t, "vocab_size", 0));
  DZ_ASSIGN_OR_RETURN(x.hidden, json_int_or(t, "hidden_size", 0));
  DZ_ASSIGN_OR_RETURN(x.n_layer, json_int_or(t, "num_hidden_layers", 0));
  DZ_ASSIGN_OR_RETURN(x.n_head, json_int_or(t, "num_attention_heads", 0));
  DZ_ASSIGN_OR_RETURN(x.ff, json_int_or(t, "intermediate_size", 0));
  for (auto [key, v] : {std::pair{"vocab_size", x.vocab}, {"hidden_size", x.hidden}, {"num_hidden_layers", x.n_layer},
                        {"num_attention_heads", x.n_head}})
    if (v <= 0)
      return Status::InvalidArgument(std::string("config.json") + (nested ? " text_config" : "") + ": key '" + key +
                                     "' is missing or not positive");
  DZ_ASSIGN_OR_RETURN(x.n_head_kv, json_int_or(t, "num_key_value_heads", x.n_head));
  DZ_ASSIGN_OR_RETURN(x.head_dim, json_int_or(t, "head_dim", x.hidden / x.n_head));
  DZ_ASSIGN_OR_RETURN(x.max_position, json_int_or(t, "max_position_embeddings", 0));
  DZ_ASSIGN_OR_RETURN(x.tie_embeddings, json_bool_or(t, "tie_word_embeddings", false));
  DZ_ASSIGN_OR_RETURN(bool bias, json_bool_or(t, "attention_bias", false));
  DZ_ASSIGN_OR_RETURN(bool qkv_bias, json_bool_or(t, "qkv_bias", false));  // Qwen2MoeConfig's key
  // Qwen2 and Qwen2-VL carry q/k/v biases without a key
  x.attn_qkv_bias = bias || qkv_bias || x.model_type == "qwen2" || x.model_type.rfind("qwen2_vl", 0) == 0 ||
                    x.model_type.rfind("qwen2_5_vl", 0) == 0;
  x.attn_o_bias = bias;
  DZ_ASSIGN_OR_RETURN(x.mlp_bias, json_bool_or(t, "mlp_bias", false));
  DZ_ASSIGN_OR_RETURN(x.lm_head_bias, json_bool_or(t, "lm_head_bias", false));
  DZ_ASSIGN_OR_RETURN(x.attn_output_gate, json_bool_or(t, "attn_output_gate", false));
  DZ_ASSIGN_OR_RETURN(bool use_qk_norm, json_bool_or(t, "use_qk_norm", false));
  x.attn_sinks = x.router_bias = x.fused_expert_bias = x.model_type == "gpt_oss";
  x.qk_norm = use_qk_norm || x.model_type.rfind("qwen3", 0) == 0;  // every Qwen3 text model has q/k norm
  // MoE
  DZ_ASSIGN_OR_RETURN(x.n_expert, first_int(t, {"num_local_experts", "num_experts", "n_routed_experts"}, 0));
  DZ_ASSIGN_OR_RETURN(x.top_k, first_int(t, {"num_experts_per_tok", "moe_topk", "num_experts_per_token"}, 0));
  DZ_ASSIGN_OR_RETURN(x.moe_ff, first_int(t, {"moe_intermediate_size"}, x.ff));
  DZ_ASSIGN_OR_RETURN(x.n_shared, first_int(t, {"n_shared_experts", "num_shared_experts"}, 0));
  DZ_ASSIGN_OR_RETURN(x.shared_ff, first_int(t, {"shared_expert_intermediate_size"}, 0));
  DZ_ASSIGN_OR_RETURN(x.first_dense, first_int(t, {"first_k_dense_replace"}, 0));
  DZ_ASSIGN_OR_RETURN(x.moe_freq, first_int(t, {"moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step"}, 1));
  DZ_ASSIGN_OR_RETURN(x.dense_layers, model::json_int_list_or_empty(t, "mlp_only_layers"));
  // Per-layer feed-forward kinds (kimi_linear's dense / sparse, deepseek_v4's moe / hash_moe):
  // a hash-routed layer holds the same experts and router as a learned one.
  DZ_ASSIGN_OR_RETURN(x.mlp_layer_types, string_list(t, "mlp_layer_types"));
  if (!x.mlp_layer_types.empty() && static_cast<int64_t>(x.mlp_layer_types.size()) != x.n_layer)
    return Status::InvalidArgument("config.json: key 'mlp_layer_types' has " + std::to_string(x.mlp_layer_types.size()) +
                                   " entries for " + std::to_string(x.n_layer) + " layers");
  DZ_ASSIGN_OR_RETURN(x.act, json_string_or(t, "hidden_activation", ""));
  if (t.contains("hidden_act") && !t["hidden_act"].is_null()) {
    DZ_ASSIGN_OR_RETURN(x.act, json_string_or(t, "hidden_act", ""));
  }
  // "" when neither the file nor its class states it: the family's code decides (add_features).
  DZ_ASSIGN_OR_RETURN(x.scoring, json_string_or(t, "scoring_func", ""));
  DZ_ASSIGN_OR_RETURN(x.topk_method, json_string_or(t, "topk_method", ""));
  // The adapters' bound: absurd layer or expert counts are refused before any per-layer list.
  DZ_RETURN_IF_ERROR(model::check_tensor_count(x.n_layer, x.n_expert, std::string("config.json") + (nested ? " text_config" : "")));
  // MLA and the sparse-attention indexer
  DZ_ASSIGN_OR_RETURN(x.kv_lora, first_int(t, {"kv_lora_rank"}, 0));
  DZ_ASSIGN_OR_RETURN(x.q_lora, first_int(t, {"q_lora_rank"}, 0));
  DZ_ASSIGN_OR_RETURN(x.qk_nope, first_int(t, {"qk_nope_head_dim"}, 0));
  DZ_ASSIGN_OR_RETURN(x.qk_rope, first_int(t, {"qk_rope_head_dim"}, 0));
  DZ_ASSIGN_OR_RETURN(x.v_head, first_int(t, {"v_head_dim"}, 0));
  DZ_ASSIGN_OR_RETURN(x.index_topk, first_int(t, {"index_topk"}, 0));
  DZ_ASSIGN_OR_RETURN(x.index_heads, first_int(t, {"index_n_heads"}, 0));
  DZ_ASSIGN_OR_RETURN(x.index_head_dim, first_int(t, {"index_head_dim"}, 0));
  if (x.index_topk > 0) {
    DZ_ASSIGN_OR_RETURN(x.index_shared, model::dsa_shared_layers(t, x.n_layer));
  }
  // Hybrid layers
  DZ_ASSIGN_OR_RETURN(x.layer_types, string_list(t, "layer_types"));
  DZ_ASSIGN_OR_RETURN(int64_t interval, first_int(t, {"full_attention_interval"}, 0));
  if (x.layer_types.empty() && interval > 0 && t.contains("linear_num_value_heads"))
    for (int64_t l = 0; l < x.n_layer; ++l)
      x.layer_types.push_back((l + 1) % interval == 0 ? "full_attention" : "linear_attention");
  DZ_ASSIGN_OR_RETURN(x.lin_k_heads, first_int(t, {"linear_num_key_heads"}, 0));
  DZ_ASSIGN_OR_RETURN(x.lin_v_heads, first_int(t, {"linear_num_value_heads"}, 0));
  DZ_ASSIGN_OR_RETURN(x.lin_k_dim, first_int(t, {"linear_key_head_dim"}, 0));
  DZ_ASSIGN_OR_RETURN(x.lin_v_dim, first_int(t, {"linear_value_head_dim"}, 0));
  DZ_ASSIGN_OR_RETURN(x.lin_conv, first_int(t, {"linear_conv_kernel_dim"}, 4));
  DZ_ASSIGN_OR_RETURN(x.kda_heads, first_int(t, {"linear_num_heads"}, 0));
  DZ_ASSIGN_OR_RETURN(x.kda_head_dim, first_int(t, {"linear_head_dim"}, 0));
  if (x.lin_v_heads > 0) x.kda_heads = 0;  // Gated DeltaNet's keys win
  DZ_ASSIGN_OR_RETURN(x.o_groups, first_int(t, {"o_groups"}, 0));
  DZ_ASSIGN_OR_RETURN(x.o_lora, first_int(t, {"o_lora_rank"}, 0));
  DZ_ASSIGN_OR_RETURN(x.hc_mult, first_int(t, {"hc_mult"}, 0));
  if (x.o_groups > 0 && (x.q_lora <= 0 || x.o_lora <= 0 || (x.n_head * x.head_dim) % x.o_groups != 0))
    return Status::InvalidArgument("config.json: o_groups " + std::to_string(x.o_groups) + " needs q_lora_rank, o_lora_rank and "
                                   "num_attention_heads x head_dim divisible by it");
  if (t.contains("compress_rates") && t["compress_rates"].is_object()) {
    const auto& c = t["compress_rates"];
    DZ_ASSIGN_OR_RETURN(x.csa_rate, first_int(c, {"compressed_sparse_attention"}, 0));
    DZ_ASSIGN_OR_RETURN(x.hca_rate, first_int(c, {"heavily_compressed_attention"}, 0));
  }
  DZ_ASSIGN_OR_RETURN(bool use_sw, json_bool_or(t, "use_sliding_window", true));
  DZ_ASSIGN_OR_RETURN(int64_t sw, first_int(t, {"sliding_window"}, 0));
  x.sliding_window = use_sw ? sw : 0;
  DZ_RETURN_IF_ERROR(read_rope(t, x));
  // Multi-token prediction
  DZ_ASSIGN_OR_RETURN(int64_t nextn, first_int(t, {"num_nextn_predict_layers"}, 0));
  DZ_ASSIGN_OR_RETURN(int64_t mtp, first_int(t, {"mtp_num_hidden_layers"}, 0));
  x.n_mtp = nextn > 0 ? nextn : mtp;
  x.mtp_qwen_style = nextn == 0 && mtp > 0;
  return Status::Ok();
}

Status read_vision(const nlohmann::json& v, const std::string& parent_type, const TextDims& text, VisionDims& x) {
  DZ_ASSIGN_OR_RETURN(x.model_type, json_string_or(v, "model_type", ""));
  if (v.contains("depth") || v.contains("vt_hidden_size")) {  // Qwen-VL ViT, Kimi MoonViT (vt_*)
    x.style = "vit";
    x.projector = "merger";
    x.patch_bias = true;
    if (v.contains("embed_dim") && !v["embed_dim"].is_null()) {
      // Qwen2-VL: the tower is embed_dim wide with an MLP of mlp_ratio x embed_dim; hidden_size
      // is the text width the merger projects to; no bias on the patch convolution, no
      // learned position table (rotary).
      DZ_ASSIGN_OR_RETURN(x.hidden, first_int(v, {"embed_dim"}, 0));
      DZ_ASSIGN_OR_RETURN(int64_t ratio, first_int(v, {"mlp_ratio"}, 4));
      x.ff = ratio * x.hidden;
      x.patch_bias = false;
      DZ_ASSIGN_OR_RETURN(x.n_layer, first_int(v, {"depth"}, 0));
      DZ_ASSIGN_OR_RETURN(x.n_head, first_int(v, {"num_heads"}, 0));
      DZ_ASSIGN_OR_RETURN(x.patch, first_int(v, {"patch_size", "spatial_patch_size"}, 14));
      DZ_ASSIGN_OR_RETURN(x.channels, first_int(v, {"in_channels", "in_chans"}, 3));
      DZ_ASSIGN_OR_RETURN(x.temporal, first_int(v, {"temporal_patch_size"}, 1));
      DZ_ASSIGN_OR_RETURN(x.merge, first_int(v, {"spatial_merge_size"}, 1));
      DZ_ASSIGN_OR_RETURN(x.out_hidden, first_int(v, {"hidden_size"}, text.hidden));
      x.n_pos = 0;
      return Status::Ok();
    }
    DZ_ASSIGN_OR_RETURN(x.hidden, first_int(v, {"hidden_size", "vt_hidden_size"}, 0));
    DZ_ASSIGN_OR_RETURN(x.ff, first_int(v, {"intermediate_size", "vt_intermediate_size"}, 4 * x.hidden));
    DZ_ASSIGN_OR_RETURN(x.n_layer, first_int(v, {"depth", "vt_num_hidden_layers"}, 0));
    DZ_ASSIGN_OR_RETURN(x.n_head, first_int(v, {"num_heads", "vt_num_attention_heads"}, 0));
    DZ_ASSIGN_OR_RETURN(x.patch, first_int(v, {"patch_size"}, 14));
    DZ_ASSIGN_OR_RETURN(x.channels, first_int(v, {"in_channels", "in_chans"}, 3));
    DZ_ASSIGN_OR_RETURN(x.temporal, first_int(v, {"temporal_patch_size"}, 1));
    DZ_ASSIGN_OR_RETURN(x.merge, first_int(v, {"spatial_merge_size"}, 0));
    if (x.merge == 0 && v.contains("merge_kernel_size") && v["merge_kernel_size"].is_array() &&
        !v["merge_kernel_size"].empty() && v["merge_kernel_size"][0].is_number_integer())
      x.merge = v["merge_kernel_size"][0].get<int64_t>();
    if (x.merge == 0) x.merge = 1;
    DZ_ASSIGN_OR_RETURN(x.out_hidden, first_int(v, {"out_hidden_size", "text_hidden_size"}, text.hidden));
    DZ_ASSIGN_OR_RETURN(int64_t h, first_int(v, {"init_pos_emb_height"}, 0));
    DZ_ASSIGN_OR_RETURN(int64_t w, first_int(v, {"init_pos_emb_width"}, 0));
    DZ_ASSIGN_OR_RETURN(x.n_pos, first_int(v, {"num_position_embeddings"}, h * w));
  } else {  // CLIP / SigLIP vision_model (CLIPVisionConfig's defaults where omitted)
    x.style = "clip";
    DZ_ASSIGN_OR_RETURN(x.hidden, first_int(v, {"hidden_size"}, 768));
    DZ_ASSIGN_OR_RETURN(x.ff, first_int(v, {"intermediate_size"}, 3072));
    DZ_ASSIGN_OR_RETURN(x.n_layer, first_int(v, {"num_hidden_layers"}, 12));
    DZ_ASSIGN_OR_RETURN(x.n_head, first_int(v, {"num_attention_heads"}, 12));
    DZ_ASSIGN_OR_RETURN(x.patch, first_int(v, {"patch_size"}, 32));
    DZ_ASSIGN_OR_RETURN(x.image, first_int(v, {"image_size"}, 224));
    DZ_ASSIGN_OR_RETURN(x.channels, first_int(v, {"num_channels"}, 3));
    x.n_pos = (x.image / x.patch) * (x.image / x.patch) + 1;
    x.out_hidden = text.hidden;
    if (x.model_type == "siglip_vision_model" || parent_type == "gemma3") {
      // SiglipVisionEmbeddings: a patch convolution with bias, one position per patch, no class
      // token; no norm before the encoder. Gemma3MultiModalProjector: mm_soft_emb_norm [tower]
      // and mm_input_projection_weight [tower, text].
      x.class_token = x.pre_norm = false;
      x.patch_bias = true;
      x.n_pos -= 1;
      if (parent_type == "gemma3") x.projector = "gemma3";
    }
    if (x.model_type == "llama4_vision_model" || parent_type == "llama4") {
      // Llama4VisionModel: CLIP's layout (class token, layernorm_pre / _post) and a pixel-shuffle
      // adapter (fc1 [projector_input_dim, intermediate_size], fc2 [projector_output_dim]^2);
      // Llama4MultiModalProjector: linear_1 [text hidden, vision_output_dim], no bias.
      x.projector = "llama4";
      DZ_ASSIGN_OR_RETURN(x.adapter_in, first_int(v, {"projector_input_dim"}, 0));
      DZ_ASSIGN_OR_RETURN(x.adapter_out, first_int(v, {"projector_output_dim"}, 0));
      DZ_ASSIGN_OR_RETURN(x.proj_in, first_int(v, {"vision_output_dim"}, x.adapter_out));
    }
  }
  return Status::Ok();
}

}  // namespace

bool TextDims::is_moe_layer(int64_t l) const {
  if (n_expert <= 0) return false;
  if (!mlp_layer_types.empty()) return l >= 0 && l < static_cast<int64_t>(mlp_layer_types.size()) && mlp_layer_types[l] != "dense";
  if (l < first_dense) return false;
  if (std::find(dense_layers.begin(), dense_layers.end(), l) != dense_layers.end()) return false;
  return moe_freq <= 1 || (l + 1) % moe_freq == 0;
}
bool TextDims::is_linear_layer(int64_t l) const {
  return l >= 0 && l < static_cast<int64_t>(layer_types.size()) && layer_types[l] == "linear_attention";
}
std::string TextDims::compressed_kind(int64_t l) const {
  if (l < 0 || l >= static_cast<int64_t>(layer_types.size()) || o_groups <= 0) return "";
  if (layer_types[l] == "compressed_sparse_attention" && csa_rate > 0) return "csa";
  if (layer_types[l] == "heavily_compressed_attention" && hca_rate > 0) return "hca";
  return "";
}
bool TextDims::is_sliding_layer(int64_t l) const {
  if (l >= 0 && l < static_cast<int64_t>(layer_types.size())) return layer_types[l] == "sliding_attention";
  return sliding_window > 0 && layer_types.empty();
}

bool TextDims::has_indexer(int64_t l) const {
  return index_topk > 0 && !model::reuses_index_selection(index_topk, index_shared, l);
}

Result<ModelDims> read_dims(const nlohmann::json& config, const FolderCode* code) {
  if (!config.is_object()) return Status::InvalidArgument("config.json: top level is not an object");
  ModelDims d;
  DZ_ASSIGN_OR_RETURN(d.model_type, json_string_or(config, "model_type", ""));
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    d.architecture = config["architectures"][0].get<std::string>();
  d.nested_text = config.contains("text_config") && config["text_config"].is_object();
  static const std::vector<PyConfigFile> kNoCode;
  const std::vector<PyConfigFile>& py = code ? code->configs : kNoCode;
  const nlohmann::json* top = table_entry(d.model_type);
  // A composite class names its text and vision classes (sub_configs) and may give them
  // defaults of its own (llava's CLIP tower sizes).
  const auto sub = [&](const char* section, const char* what) -> const nlohmann::json* {
    if (!top || !top->contains(what) || !(*top)[what].is_object() || !(*top)[what].contains(section)) return nullptr;
    return &(*top)[what][section];
  };
  nlohmann::json t_in = d.nested_text ? config["text_config"] : config;
  std::string text_type = d.model_type;
  if (d.nested_text) {
    DZ_ASSIGN_OR_RETURN(text_type, json_string_or(t_in, "model_type", ""));
    if (text_type.empty() && sub("text_config", "sub_configs") && sub("text_config", "sub_configs")->is_string())
      text_type = sub("text_config", "sub_configs")->get<std::string>();
  }
  // tie_word_embeddings: text_config's, else the top level's, else the text class's default,
  // else the composite class's.
  const bool tie_at_top = d.nested_text && (!t_in.contains("tie_word_embeddings") || t_in["tie_word_embeddings"].is_null()) &&
                          config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null();
  if (tie_at_top) t_in["tie_word_embeddings"] = config["tie_word_embeddings"];
  nlohmann::json t = fill_defaults(t_in, d.nested_text ? "config.json text_config" : "config.json", "", text_type, py,
                                   sub("text_config", "sub_config_defaults"), d.origins, d.risks);
  if (tie_at_top) d.origins["tie_word_embeddings"].detail = "config.json (top level)";
  if (d.nested_text && !text_type.empty() && !t.contains("model_type")) t["model_type"] = text_type;
  if (d.nested_text && (!t.contains("tie_word_embeddings") || t["tie_word_embeddings"].is_null()) && top &&
      (*top)["defaults"].contains("tie_word_embeddings") && (*top)["defaults"]["tie_word_embeddings"].is_boolean()) {
    t["tie_word_embeddings"] = (*top)["defaults"]["tie_word_embeddings"];
    d.origins["tie_word_embeddings"] = {KeyFrom::kTable, "transformers " + defaults_table_version() + " " +
                                        (*top)["class"].get<std::string>(), t["tie_word_embeddings"]};
  }
  if (const nlohmann::json* e = table_entry(text_type); e && e->contains("class")) d.text_class = (*e)["class"].get<std::string>();
  Status text = read_text(t, d.nested_text, d.text);
  if (text.ok()) text = apply_layout(t, d.text, d.origins);
  if (!text.ok()) return d.nested_text ? text.with_context("text_config") : text;
  // What neither the file nor a class gives is the analysis's own fallback; a class that has no
  // such key at all (no head_dim, no KV-head count) computes it the one way there is.
  const nlohmann::json* text_entry = table_entry(text_type);
  for (auto [key, guess] : {std::pair{"num_key_value_heads", "num_attention_heads"},
                            {"head_dim", "hidden_size / num_attention_heads"},
                            {"tie_word_embeddings", "false (untied)"}, {"intermediate_size", "0 (no dense MLP)"}}) {
    if (d.origins.count(key)) continue;
    const bool structural = std::string(key) != "tie_word_embeddings" && std::string(key) != "intermediate_size";
    if (structural && text_entry && !(*text_entry)["defaults"].contains(key) &&
        !(text_entry->contains("derived") && (*text_entry)["derived"].contains(key)))
      d.origins[key] = {KeyFrom::kDerived, std::string(key) + " = " + guess + " (" + d.text_class + " has no " + key + " key)", nullptr};
    else
      d.origins[key] = {KeyFrom::kGuessed, std::string("analysis fallback: ") + guess, nullptr};
  }
  if (d.text.n_expert > 0 && !d.origins.count("moe_intermediate_size"))
    d.origins["moe_intermediate_size"] = {KeyFrom::kGuessed, "analysis fallback: intermediate_size", nullptr};
  for (const char* key : {"torch_dtype", "dtype"}) {
    for (const nlohmann::json* j : {&config, &std::as_const(t)})
      if (d.torch_dtype.empty() && j->contains(key) && (*j)[key].is_string()) d.torch_dtype = (*j)[key].get<std::string>();
  }
  if (config.contains("vision_config") && config["vision_config"].is_object()) {
    VisionDims v;
    DZ_ASSIGN_OR_RETURN(std::string vision_type, json_string_or(config["vision_config"], "model_type", ""));
    // A vision_config that names the composite class itself (Qwen2-VL's says "qwen2_vl") means
    // the composite's vision class.
    const bool names_parent = !vision_type.empty() && vision_type == d.model_type;
    if ((vision_type.empty() || names_parent) && sub("vision_config", "sub_configs") && sub("vision_config", "sub_configs")->is_string())
      vision_type = sub("vision_config", "sub_configs")->get<std::string>();
    const nlohmann::json vc = fill_defaults(config["vision_config"], "config.json vision_config", "vision_config.", vision_type,
                                            py, sub("vision_config", "sub_config_defaults"), d.origins, d.risks);
    DZ_RETURN_IF_ERROR(read_vision(vc, d.model_type, d.text, v).with_context("vision_config"));
    d.vision = v;
  }
  d.has_audio = config.contains("audio_config") && config["audio_config"].is_object();
  for (const nlohmann::json* j : {&config, &std::as_const(t)}) {
    if (!d.quant_method.empty() || !j->contains("quantization_config") || !(*j)["quantization_config"].is_object())
      continue;
    const auto& q = (*j)["quantization_config"];
    DZ_ASSIGN_OR_RETURN(d.quant_method, json_string_or(q, "quant_method", "unknown"));
    DZ_ASSIGN_OR_RETURN(std::string fmt, json_string_or(q, "fmt", ""));
    DZ_ASSIGN_OR_RETURN(std::string format, json_string_or(q, "format", ""));
    d.quant_detail = fmt.empty() ? format : fmt;
    if (q.contains("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2)
    {
      d.quant_detail += " " + q["weight_block_size"][0].dump() + "x" + q["weight_block_size"][1].dump() + " blocks";
      if (q["weight_block_size"][0].is_number_integer() && q["weight_block_size"][1].is_number_integer()) {
        d.quant_block_rows = q["weight_block_size"][0].get<int64_t>();
        d.quant_block_cols = q["weight_block_size"][1].get<int64_t>();
      }
    }
    if (q.contains("config_groups") && q["config_groups"].is_object())
      for (const auto& [name, g] : q["config_groups"].items())
        if (g.is_object() && g.contains("weights") && g["weights"].is_object()) {
          const auto& w = g["weights"];
          if (w.contains("num_bits")) d.quant_detail += " " + w["num_bits"].dump() + "-bit";
          if (w.contains("type") && w["type"].is_string()) d.quant_detail += " " + w["type"].get<std::string>();
          if (w.contains("group_size")) d.quant_detail += " group " + w["group_size"].dump();
          if (w.contains("symmetric") && w["symmetric"].is_boolean())
            d.quant_detail += w["symmetric"].get<bool>() ? " symmetric" : " asymmetric";
          // One integer group format is modelled in bytes: pack-quantized, int, symmetric.
          const bool packed = d.quant_method == "compressed-tensors" && format == "pack-quantized" &&
                              w.contains("type") && w["type"] == "int" && w.value("symmetric", true) &&
                              w.contains("num_bits") && w["num_bits"].is_number_integer() &&
                              w.contains("group_size") && w["group_size"].is_number_integer();
          if (packed && d.quant_bits == 0) {
            d.quant_bits = w["num_bits"].get<int64_t>();
            d.quant_group = w["group_size"].get<int64_t>();
            if (d.quant_bits <= 0 || 32 % d.quant_bits != 0 || d.quant_group <= 0)
              return Status::InvalidArgument("config.json quantization_config: num_bits " + w["num_bits"].dump() +
                                             " / group_size " + w["group_size"].dump() + " cannot pack into int32");
          }
        }
    if (d.quant_method == "mxfp4") {
      d.mxfp4 = true;
      d.quant_detail = "e2m1 in blocks of 32 with e8m0 scales (routed experts)";
      DZ_ASSIGN_OR_RETURN(d.quant_ignore, string_list(q, "modules_to_not_convert"));
    }
    if (d.quant_bits > 0 && q.contains("ignore") && q["ignore"].is_array())
      for (const auto& x : q["ignore"])
        if (x.is_string()) d.quant_ignore.push_back(x.get<std::string>());
  }
  return d;
}

}  // namespace dayzero::analysis
