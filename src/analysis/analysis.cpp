// The analysis itself (analysis.h): counts by component and template from the tensors, the
// features with their evidence and support status, the precision-sensitive points, and the
// text and JSON forms that `dayzero inspect` prints.
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>

#include "analysis/analysis.h"
#include "analysis/evidence.h"
#include "checkpoint/catalog.h"
#include "core/dtype.h"
#include "core/json.h"
#include "model/registry.h"

namespace dayzero::analysis {
namespace fs = std::filesystem;
namespace {

using model::Component;

std::string dense_dtype(const std::string& torch_dtype) {
  std::string t = torch_dtype.rfind("torch.", 0) == 0 ? torch_dtype.substr(6) : torch_dtype;
  if (t == "float16") return "F16";
  if (t == "float32") return "F32";
  return "BF16";
}

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

bool any_part(const Analysis& a, const std::string& part) { return a.parts.count(part) && a.parts.at(part) > 0; }

const Group* first_group(const Analysis& a, const std::string& part) {
  for (const auto& g : a.groups)
    if (g.part == part) return &g;
  return nullptr;
}

std::string pattern(const Analysis& a, const std::string& part, const std::string& fallback) {
  const Group* g = first_group(a, part);
  if (!g) return fallback;
  std::string t = g->tmpl;
  // model.layers.{L}.self_attn.indexer.wk.weight -> model.layers.{L}.self_attn.indexer.*
  for (const char* key : {"indexer.", "linear_attn.", "experts.{E}.", "shared_expert.", "shared_experts.", "visual.",
                          "vision_model.", "multi_modal_projector.", "merger."})
    if (auto p = t.find(key); p != std::string::npos) return t.substr(0, p + std::string(key).size()) + "*";
  return t;
}

// Families whose modeling code routes by a softmax over the router logits (top-k renormalised)
// and whose configs state no scoring_func.
bool softmax_family(const std::string& model_type) {
  for (const char* m : {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "granitemoe",
                        "olmoe", "gpt_oss"})
    if (model_type == m) return true;
  return false;
}

void add_features(Analysis& a, const nlohmann::json& config) {
  const TextDims& t = a.dims.text;
  const bool known = !a.adapter.empty();
  // A feature is supported with an adapter (the adapter claims the config), or through a proof
  // (evidence.h) that an adapter runs its block under a test; otherwise it needs review.
  auto claim = [&](const std::string& name, const std::string& detail, const std::string& evidence,
                   const std::string& block, const std::string& key) {
    Finding f{name, detail, evidence, FeatureStatus::kReview, block, key, ""};
    if (known) {
      f.status = FeatureStatus::kAdapter, f.block = a.adapter;
    } else if (const auto p = proofs_of(key); !p.empty()) {
      f.status = FeatureStatus::kBlock, f.block = p.front()->block;
      f.proof = std::string("adapter ") + p.front()->adapter + ", test " + p.front()->test;
    } else {
      f.block = block.empty() ? "nothing here runs it under a test"
                              : block + " has no test on a model with it (no proof in src/analysis/evidence.cpp)";
    }
    a.features.push_back(std::move(f));
  };
  auto ok = [&](const std::string& name, const std::string& detail, const std::string& evidence, const std::string& block) {
    claim(name, detail, evidence, block, name);
  };
  int64_t n_unknown = 0;   // layers of a kind the analysis does not know (layer_types)
  int64_t n_unproven = 0;  // layers whose attention no proof covers (unknown kinds, DeepSeek-V4's)
  // A detail of attention (rotary, norms, biases, gates) proven on the known attention kinds
  // proves nothing about layers of a kind the analysis does not know.
  auto attn_ok = [&](const std::string& name, const std::string& detail, const std::string& evidence,
                     const std::string& block, const std::string& key) {
    claim(name, detail, evidence, block, key);
    if (n_unproven > 0 && a.features.back().status == FeatureStatus::kBlock) {
      a.features.back().status = FeatureStatus::kReview;
      a.features.back().block = block + " is proven on other attention kinds only; " + std::to_string(n_unproven) +
                                " layers are of a kind no proof covers";
      a.features.back().proof.clear();
    }
  };
  // A value the analysis does not know needs review even where an adapter claims the model.
  // A proof of the value itself ("scoring_func=sqrtsoftplus") makes it a claim like any other.
  auto review = [&](const std::string& name, const std::string& detail, const std::string& evidence, const std::string& key) {
    if (!proofs_of(key).empty()) return claim(name, detail, evidence, "", key);
    a.features.push_back({name, detail, evidence, FeatureStatus::kReview, "the analysis does not know this value", key, ""});
  };
  auto missing = [&](const std::string& name, const std::string& detail, const std::string& evidence,
                     const std::string& what) {
    a.features.push_back({name, detail, evidence, FeatureStatus::kNewBlock, what, name, ""});
  };
  const std::string heads = std::to_string(t.n_head) + " q / " + std::to_string(t.n_head_kv) + " kv heads, head_dim " +
                            std::to_string(t.head_dim);
  // Layers of a kind the analysis does not know (layer_types) are named, never read as the
  // nearest known kind; the attention features below describe the known ones.
  const nlohmann::json& section = a.dims.nested_text ? config["text_config"] : config;
  const auto unknown_kinds = unknown_enum_values(section, "layer_types");
  for (const auto& [kind, n] : unknown_kinds) {
    n_unknown += n;
    review("layer kind '" + kind + "'",
           std::to_string(n) + " of " + std::to_string(t.n_layer) +
               " layers; counted as the config's plain attention (its own tensors are not in the estimate)",
           "layer_types", "layer_types=" + kind);
  }
  int64_t n_linear = 0, n_sliding = 0, n_csa = 0, n_hca = 0;
  for (int64_t l = 0; l < t.n_layer; ++l) {
    n_linear += t.is_linear_layer(l), n_sliding += t.is_sliding_layer(l);
    n_csa += t.compressed_kind(l) == "csa", n_hca += t.compressed_kind(l) == "hca";
  }
  // DeepSeek-V4's attention (o_groups) is none of the generic kinds on any layer; its own proofs
  // (evidence.cpp) cover its three layer kinds.
  const int64_t n_full = t.o_groups > 0 ? 0 : t.n_layer - n_linear - n_unknown;
  n_unproven = n_unknown;
  if (t.o_groups > 0) {
    claim("shared-KV attention (DeepSeek-V4)",
          std::to_string(t.n_head) + " q heads over one KV head of " + std::to_string(t.head_dim) +
              " read as both key and value, q low-rank " + std::to_string(t.q_lora) + ", window " +
              std::to_string(t.sliding_window) + " on every layer",
          "o_groups, num_key_value_heads, q_lora_rank", "", "shared-KV attention (DeepSeek-V4)");
    claim("sliding window", "window " + std::to_string(t.sliding_window) + " on all " + std::to_string(t.n_layer) +
                                " layers (DeepSeek-V4's attention: its own window of K=V entries)",
          "sliding_window", "", "shared-KV attention (DeepSeek-V4)");
  }
  if (n_csa > 0)
    claim("compressed sparse attention", std::to_string(n_csa) + " of " + std::to_string(t.n_layer) + " layers: every " +
                                             std::to_string(t.csa_rate) + " tokens compressed into one KV entry, the top " +
                                             std::to_string(t.index_topk) + " entries picked by an indexer",
          "layer_types, compress_rates", "", "layer_types=compressed_sparse_attention");
  if (n_hca > 0)
    claim("heavily compressed attention", std::to_string(n_hca) + " of " + std::to_string(t.n_layer) + " layers: every " +
                                              std::to_string(t.hca_rate) + " tokens compressed into one KV entry",
          "layer_types, compress_rates", "", "layer_types=heavily_compressed_attention");
  if (t.kv_lora > 0) {
    ok("MLA", "q_lora " + std::to_string(t.q_lora) + ", kv_lora " + std::to_string(t.kv_lora) + ", qk " +
                  std::to_string(t.qk_nope) + "+" + std::to_string(t.qk_rope) + " (rope), v " + std::to_string(t.v_head),
       "kv_lora_rank", "blocks/mla");
  } else if (n_full > 0) {
    const char* kind = t.n_head_kv == 1 ? "MQA" : t.n_head_kv < t.n_head ? "GQA" : "MHA";
    ok(kind, heads + (n_linear || n_unknown ? " in " + std::to_string(n_full) + " full-attention layers" : ""),
       "num_attention_heads / num_key_value_heads", "blocks/attention");
  }
  if (t.index_topk > 0) {
    const std::string detail = "index_topk " + std::to_string(t.index_topk) + ", " + std::to_string(t.index_heads) +
                               " heads x " + std::to_string(t.index_head_dim);
    const std::string evidence = "index_topk; tensors " + pattern(a, "sparse-attention indexer", "(none in the checkpoint)");
    // The deepseek_v32 and glm_moe_dsa adapters run it (blocks/dsa_indexer: half-split or
    // interleaved rope, glm_moe_dsa's shared top-k layers); other families' indexers are not built.
    if (a.adapter == "deepseek_v32" || a.adapter == "glm_moe_dsa") ok("sparse attention indexer (DSA)", detail, evidence, "blocks/dsa_indexer");
    else if (t.o_groups > 0)  // DeepSeek-V4's lightning indexer over its compressed entries (blocks/v4_indexer)
      claim("lightning indexer (DeepSeek-V4)", detail + " over the compressed entries of the CSA layers", evidence, "",
            "lightning indexer (DeepSeek-V4)");
    else if (n_unknown > 0 || t.kv_lora == 0)  // blocks/dsa_indexer selects keys for MLA; this indexer serves another attention
      a.features.push_back({"sparse attention indexer", detail, evidence, FeatureStatus::kReview,
                            "blocks/dsa_indexer runs DeepSeek-V3.2's indexer on MLA; this model's attention is not MLA",
                            "index_topk (not on MLA)", ""});
    else missing("sparse attention indexer (DSA)", detail, evidence, "an indexer that picks the top-k keys per query before MLA");
  }
  // Gated DeltaNet, the output gate, partial rotary and the gated shared expert are built
  // (blocks/gated_deltanet, blocks/attention; the qwen3_next adapter composes them). Linear
  // attention without Gated DeltaNet's keys is another rule (Kimi Delta Attention, ...).
  const std::vector<KeyFeature> by_key = key_features(config);
  const bool kda = std::any_of(by_key.begin(), by_key.end(),
                               [](const KeyFeature& k) { return k.feature == "linear attention (Kimi Delta Attention)"; });
  if (n_linear > 0 && t.lin_v_heads > 0)
    ok("linear attention (Gated DeltaNet)",
       std::to_string(n_linear) + " of " + std::to_string(t.n_layer) + " layers, " + std::to_string(t.lin_k_heads) +
           " k / " + std::to_string(t.lin_v_heads) + " v heads, conv kernel " + std::to_string(t.lin_conv),
       "layer_types; tensors " + pattern(a, "linear attention", "(none)"), "blocks/gated_deltanet");
  else if (n_linear > 0 && !kda)
    review("linear attention (kind unknown)",
           std::to_string(n_linear) + " of " + std::to_string(t.n_layer) +
               " layers without Gated DeltaNet's keys (linear_num_value_heads ...): its rule is not known",
           "layer_types", "layer_types=linear_attention");
  for (const KeyFeature& k : by_key)
    claim(k.feature, k.detail + (k.feature == "linear attention (Kimi Delta Attention)"
                                     ? "; " + std::to_string(n_linear) + " of " + std::to_string(t.n_layer) + " layers"
                                     : ""),
          k.key, "", k.feature);
  if (t.attn_output_gate)
    attn_ok("attention output gate", "sigmoid gate on the attention output (q_proj doubled)", "attn_output_gate",
       "blocks/attention", "attention output gate");
  if (n_sliding > 0 && t.o_groups == 0)
    missing("sliding window", "window " + std::to_string(t.sliding_window) + " in " + std::to_string(n_sliding) + " layers",
            t.layer_types.empty() ? "sliding_window" : "layer_types", "a bounded-window KV cache and mask");
  if (any_part(a, "attention sinks") && t.o_groups > 0)  // DeepSeek-V4's, in blocks/v4_attention
    claim("attention sinks", "learned per-head sink logits", "tensors " + pattern(a, "attention sinks", ""), "",
          "attention sinks (DeepSeek-V4)");
  else if (any_part(a, "attention sinks"))
    missing("attention sinks", "learned per-head sink logits", "tensors " + pattern(a, "attention sinks", ""),
            "a sink term in the attention softmax");
  if (t.qk_norm && t.kv_lora == 0)
    attn_ok("q/k norm", "per-head RMSNorm of q and k", "model_type / use_qk_norm", "blocks/attention", "q/k norm");
  if (t.attn_qkv_bias) {
    const std::string name = t.attn_o_bias ? "attention bias (q/k/v/o)" : "attention bias (q/k/v)";
    attn_ok(name, t.attn_o_bias ? "q/k/v/o" : "q/k/v", "attention_bias", "blocks/attention", name);
  }
  // RoPE
  if (t.rope_type == "yarn" || t.rope_type == "llama3" || t.rope_type == "linear")
    attn_ok("RoPE scaling", t.rope_type + " x" + num(t.rope_factor), "rope_scaling", "model/hparams rope_inv_freq",
            "RoPE scaling " + t.rope_type);
  else if (t.rope_type != "default")
    missing("RoPE scaling", t.rope_type + " x" + num(t.rope_factor), "rope_scaling", "the " + t.rope_type + " rope type");
  if (t.mrope) missing("multimodal RoPE (M-RoPE)", "sections over t/h/w", "rope_parameters.mrope_section", "3-D rotary positions");
  if (t.partial_rotary < 1.0 && t.kv_lora == 0)
    attn_ok("partial rotary", num(t.partial_rotary) + " of head_dim rotated", "partial_rotary_factor", "blocks/attention",
            "partial rotary");
  // MLP / MoE
  if (t.n_expert > 0) {
    int64_t moe = 0;
    for (int64_t l = 0; l < t.n_layer; ++l) moe += t.is_moe_layer(l);
    const std::string experts = "top-" + std::to_string(t.top_k) + " of " + std::to_string(t.n_expert) + " experts (ffn " +
                                std::to_string(t.moe_ff) + ") in " + std::to_string(moe) + " of " +
                                std::to_string(t.n_layer) + " layers";
    if (t.scoring == "sigmoid")
      ok("MoE sigmoid routing", experts + (t.topk_method.empty() ? "" : ", " + t.topk_method), "scoring_func",
         "blocks/moe_sigmoid");
    else if (t.scoring == "softmax" || (t.scoring.empty() && softmax_family(t.model_type)))
      ok("MoE softmax routing", experts, t.scoring.empty() ? "model_type (its modeling code routes by softmax)" : "scoring_func",
         "blocks/moe");
    else if (t.scoring.empty())  // the family's code decides: not read as softmax
      review("MoE routing (score function not stated)",
             experts + "; config.json and its class state no scoring_func, and " + t.model_type +
                 " is not a family whose code is known to route by softmax",
             "model_type", "scoring_func=(not stated)");
    else  // sqrtsoftplus and any other score function: never read as softmax
      review("MoE routing (scoring_func " + t.scoring + ")", experts, "scoring_func", "scoring_func=" + t.scoring);
    int64_t hash = 0;
    for (const auto& k : t.mlp_layer_types) hash += k == "hash_moe";
    if (hash > 0)
      claim("hash routing", std::to_string(hash) + " of " + std::to_string(t.n_layer) +
                                " MoE layers pick their experts from a token-id table (tid2eid [vocab, top_k]) instead of the router's top-k",
            "mlp_layer_types", "blocks/moe", "mlp_layer_types=hash_moe");
    if (t.n_shared > 0)
      ok("shared experts", std::to_string(t.n_shared) + " x " + std::to_string(t.moe_ff), "n_shared_experts",
         "blocks/moe_sigmoid");
    if (t.shared_ff > 0)
      ok("gated shared expert", "ffn " + std::to_string(t.shared_ff) + " behind a sigmoid gate",
         "shared_expert_intermediate_size; tensors " + pattern(a, "shared experts", "(none)"), "adapters/qwen3_next");
  }
  {  // gpt-oss: a router with a bias and fused experts with biases (DeepSeek's
     // e_score_correction_bias is a selection bias of sigmoid routing, which blocks/moe runs)
    const auto ends_with = [](const std::string& s, const char* tail) {
      const size_t n = std::char_traits<char>::length(tail);
      return s.size() > n && s.compare(s.size() - n, n, tail) == 0;
    };
    std::string biases;
    for (const auto& g : a.groups)
      if ((g.component == Component::kRouter || g.component == Component::kRoutedExpert) &&
          (ends_with(g.tmpl, "_bias") || ends_with(g.tmpl, ".bias")) && !ends_with(g.tmpl, "e_score_correction_bias"))
        biases += (biases.empty() ? "" : ", ") + g.tmpl;
    if (!biases.empty())
      missing("router and expert biases", "biases on the router logits and the expert projections", "tensors " + biases,
              "biased router and expert Linears in blocks/moe");
  }
  if (a.main.dense_mlp > 0) {
    // Neither the file nor its class stating it, the family's code decides: not read as SiLU.
    const std::string act = t.act.empty() ? "activation not stated" : t.act;
    if (t.gated_mlp && (act == "silu" || act == "swish"))
      ok("dense SwiGLU MLP", "ffn " + std::to_string(t.ff), "intermediate_size", "blocks/mlp");
    else
      ok(std::string(t.gated_mlp ? "dense gated MLP (" : "dense two-matrix MLP (") + act + ")", "ffn " + std::to_string(t.ff),
         "intermediate_size, hidden_act", "blocks/mlp");
  }
  if (t.tie_embeddings) ok("tied embeddings", "lm_head = embed_tokens", "tie_word_embeddings", "blocks/dense_decoder");
  if (t.n_mtp > 0)
    a.features.push_back({"MTP", std::to_string(t.n_mtp) + " multi-token-prediction layer(s), checked, never run",
                          t.mtp_qwen_style ? "mtp_num_hidden_layers" : "num_nextn_predict_layers", FeatureStatus::kSkipped,
                          "declared and counted apart", "MTP", ""});
  if (a.dims.vision) {
    const VisionDims& v = *a.dims.vision;
    // With an adapter (llava) the tower and projector run; without one they still need a block.
    // qwen3_5_moe's adapter runs the text model only and claims its tower without loading it.
    const bool runs_vision = known && a.adapter != "qwen3_5_moe";
    auto vision = [&](const std::string& name, const std::string& detail, const std::string& evidence,
                      const std::string& what) {
      if (runs_vision) ok(name, detail, evidence, what);
      else a.features.push_back({name, detail, evidence, FeatureStatus::kNewBlock, what, name, ""});
    };
    vision("vision tower", v.model_type + " " + std::to_string(v.n_layer) + " layers, hidden " + std::to_string(v.hidden) +
                                ", patch " + std::to_string(v.patch),
            "vision_config; tensors " + pattern(a, "vision tower", "(none)"), "a vision encoder block");
    vision("projector", "vision " + std::to_string(v.hidden) + " -> text " + std::to_string(t.hidden),
            "tensors " + pattern(a, "projector", "(none)"), "a multimodal projector and image-token merge");
  }
  if (a.dims.has_audio) missing("audio tower", "", "audio_config", "an audio encoder block");
  if (!a.dims.quant_method.empty()) {
    const std::string what = a.dims.quant_method + " " + a.dims.quant_detail;
    if (a.dims.quant_method == "fp8" && a.dims.quant_block_rows > 0)
      ok("FP8 block scales", what, "quantization_config", "checkpoint/fp8 (dequantized at load)");
    else if (a.dims.quant_method == "compressed-tensors" && a.dims.quant_bits == 4 && a.adapter == "kimi_k25")
      ok("quantized weights", what, "quantization_config", "checkpoint/pack_quantized (dequantized at load)");
    else if (a.dims.quant_method == "compressed-tensors" && !a.adapter.empty() &&
             (a.dims.quant_detail.rfind("mxfp4-pack-quantized", 0) == 0 ||
              a.dims.quant_detail.rfind("nvfp4-pack-quantized", 0) == 0))
      ok("FP4 experts", what, "quantization_config",
         "checkpoint/fp4 (routed experts kept as stored on the CPU, else dequantized at load)");
    else if (a.dims.mxfp4)
      missing("quantized weights", what, "quantization_config.quant_method; tensors " +
              pattern(a, "quantization scales", "(none)"),
              "MXFP4 expert matmuls (e2m1 _blocks, e8m0 _scales) or their dequantization at load");
    else
      missing("quantized weights", what, "quantization_config.quant_method", "a " + a.dims.quant_method + " weight format");
  }
  // Tensor groups no rule explains.
  for (const auto& g : a.groups)
    if (g.component == Component::kUnknown && g.part == "unknown")
      a.features.push_back({"unknown tensors", std::to_string(g.tensors) + " tensor(s), " + std::to_string(g.bytes) + " bytes",
                            g.tmpl, FeatureStatus::kUnknown, "no rule explains this group", "unknown tensors", ""});
  // Precision-sensitive points.
  if (a.dims.mxfp4) {
    int64_t blocks = 0, n = 0;
    std::string names;
    for (const auto& g : a.groups)
      if (g.tmpl.size() > 7 && g.tmpl.compare(g.tmpl.size() - 7, 7, "_blocks") == 0) {
        blocks += g.tensors, n += g.params;
        names += (names.empty() ? "" : ", ") + g.tmpl;
      }
    a.precision.push_back("MXFP4 weights: " + std::to_string(blocks) + " tensor(s) (" + names + "), " +
                          model::grouped_count(n) +
                          " parameters as e2m1 (|x| <= 6) times a power of two per 32 (e8m0 _scales)");
  } else if (!a.dims.quant_method.empty()) {
    a.precision.push_back("quantized weights: " + a.dims.quant_method + " " + a.dims.quant_detail);
  }
  if (t.rope_type == "yarn" && t.rope_factor >= 8)
    a.precision.push_back("YaRN with factor " + num(t.rope_factor) + " (attention scale and long-context frequencies)");
  if (t.scoring == "sigmoid") a.precision.push_back("sigmoid routing with a selection bias (ties in top-k flip experts)");
  if (any_part(a, "attention sinks")) a.precision.push_back("attention sinks in the softmax");
  if (t.vocab >= 150000) a.precision.push_back("large vocabulary (" + std::to_string(t.vocab) + "): logits near-ties");
  if (n_linear > 0) a.precision.push_back("linear-attention recurrent state accumulated over the sequence (keep f32)");
  // What the estimate leaves out: the parameters of features no rule counts.
  if (a.source != Source::kHeaders) {
    std::string left;
    // Counted where the analysis has the family's layout (tensors.cpp): DeepSeek-V4's
    // hyper-connections, grouped output and compressors, Kimi Delta Attention's layers.
    const auto counted = [&](const std::string& f) {
      return (f == "hyper-connections" && t.hc_mult > 0) || (f == "grouped output projection" && t.o_groups > 0) ||
             (f == "compressed KV attention" && t.o_groups > 0 && (t.csa_rate > 0 || t.hca_rate > 0)) ||
             (f == "linear attention (Kimi Delta Attention)" && t.kda_heads > 0 && t.kda_head_dim > 0);
    };
    for (const KeyFeature& k : by_key)
      if (k.params && !counted(k.feature)) left += (left.empty() ? "" : ", ") + k.feature + " (" + k.key + ")";
    if (n_unknown > 0) {
      std::string kinds;
      for (const auto& [kind, n] : unknown_kinds) kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
      left += (left.empty() ? "" : ", ") + std::string("the own tensors of layer kinds the analysis does not know (") + kinds +
              ": counted as plain attention of the config's sizes)";
    }
    int64_t hash_layers = 0;
    for (const auto& k : t.mlp_layer_types) hash_layers += k == "hash_moe";
    if (hash_layers > 0)
      left += (left.empty() ? "" : ", ") + std::string("the hash layers' token-id tables (") + std::to_string(hash_layers) +
              " x [vocab, top_k] int64 buffers; their experts and router are counted)";
    if (!left.empty()) a.notes.push_back("the parameter estimate leaves out: " + left);
    if (t.o_groups > 0)
      a.notes.push_back("cache: DeepSeek-V4's layers are described as a window of sliding_window tokens of one KV head "
                        "counted as k and v (the model keeps one tensor for both); the compressed entries (one per "
                        "compress_rates tokens on the compressed layers) are not described");
  }
  // The families whose adapters prove the most of this model's features.
  if (!known) {
    std::vector<std::string> keys;
    for (const Finding& f : a.features)
      if (f.status != FeatureStatus::kSkipped && f.status != FeatureStatus::kUnknown) keys.push_back(f.key);
    a.closest = closest_families(keys);
  }
}

}  // namespace

const char* source_name(Source s) {
  switch (s) {
    case Source::kHeaders: return "safetensors headers";
    case Source::kIndexNames: return "index names + shapes from the config";
    case Source::kConfig: return "config estimate";
  }
  return "?";
}

const char* feature_status_name(FeatureStatus s) {
  switch (s) {
    case FeatureStatus::kBlock: return "supported by block";
    case FeatureStatus::kAdapter: return "supported by adapter";
    case FeatureStatus::kNewBlock: return "needs a new block";
    case FeatureStatus::kSkipped: return "skipped";
    case FeatureStatus::kUnknown: return "unknown";
    case FeatureStatus::kReview: return "needs review";
  }
  return "?";
}

Result<Analysis> analyze(const nlohmann::json& config, std::vector<TensorInfo> tensors, Source source,
                         const FolderCode* code) {
  Analysis a;
  DZ_ASSIGN_OR_RETURN(a.dims, read_dims(config, code));
  // An adapter speaks for the model's features only where it runs it: one that reads the family
  // but refuses its forward pass (Adapter::forward_support) proves nothing, so its features go
  // through the proofs like an unknown family's.
  if (auto ad = model::find_adapter(config); ad.ok()) {
    const auto hp = (*ad)->parse_hparams(config);
    if (hp.ok() && (*ad)->forward_support(*hp).ok()) a.adapter = (*ad)->family();
  }
  a.source = source;
  if (source == Source::kConfig) tensors = synthesize_tensors(a.dims);
  const TextDims& t = a.dims.text;
  const std::string dense = dense_dtype(a.dims.torch_dtype);
  const bool fp8 = a.dims.quant_method == "fp8" && a.dims.quant_block_rows > 0;
  std::vector<TensorInfo> scales;
  std::map<std::string, Group> groups;
  std::map<int64_t, int64_t> routed_by_layer;
  auto ends_with = [](const std::string& s, const char* x) {
    const std::string t = x;
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (auto& x : tensors) {
    const Classified c = classify(x.name, a.dims);
    const int64_t numel = shape_numel(x.shape);
    const int64_t n = tensor_params(x.name, x.shape, a.dims);
    if (source != Source::kHeaders) {
      // FP8 checkpoints store the layers' Linear weights as e4m3 with f32 block scales;
      // pack-quantized ones as int32 words of packed integers with bf16 group scales.
      const bool quant = fp8 && c.layer >= 0 && x.shape.size() == 2 && c.component != Component::kRouter &&
                         c.component != Component::kVision && c.component != Component::kMtpHead &&
                         c.component != Component::kQuantScale && c.component != Component::kNorm;
      const bool packed = a.dims.quant_bits > 0 && (ends_with(x.name, ".weight_packed") || ends_with(x.name, ".weight_shape"));
      const bool group_scale = a.dims.quant_bits > 0 && ends_with(x.name, ".weight_scale");
      // MXFP4 experts: uint8 blocks (two e2m1 a byte) and uint8 e8m0 scales.
      const bool mx = a.dims.mxfp4 && (ends_with(x.name, "_blocks") || ends_with(x.name, "_scales"));
      x.dtype = mx ? "U8" : packed ? "I32" : group_scale ? "BF16" : c.component == Component::kQuantScale ? "F32" : quant ? "F8_E4M3" : dense;
      x.bytes = static_cast<uint64_t>(numel) *
                (x.dtype == "F32" || x.dtype == "I32" ? 4 : x.dtype == "F8_E4M3" || x.dtype == "U8" ? 1 : 2);
      if (quant && source == Source::kConfig) {
        TensorInfo s{x.name + "_scale_inv", *shape_from_name(x.name + "_scale_inv", a.dims), "F32", 0};
        s.bytes = static_cast<uint64_t>(shape_numel(s.shape)) * 4;
        scales.push_back(std::move(s));
      }
    }
    a.weight_bytes += x.bytes;
    Group& g = groups[name_template(x.name)];
    if (g.tensors == 0) g = {name_template(x.name), c.part, c.component, 0, 0, 0};
    g.tensors += 1;
    g.bytes += x.bytes;
    if (c.component == Component::kQuantScale) {
      a.scale_tensors += 1;
      continue;
    }
    g.params += n;
    if (c.component == Component::kUnknown && c.part == "unknown") a.unknown_tensors += 1, a.unknown_bytes += x.bytes;
    a.parts[c.part] += n;
    model::component_slot(c.mtp ? a.mtp : a.main, c.component) += n;
    if (!c.mtp && c.component == Component::kRoutedExpert) routed_by_layer[c.layer] += n;
  }
  for (auto& s : scales) {
    a.weight_bytes += s.bytes;
    a.scale_tensors += 1;
    Group& g = groups[name_template(s.name)];
    if (g.tensors == 0) g = {name_template(s.name), "quantization scales", Component::kQuantScale, 0, 0, 0};
    g.tensors += 1;
    g.bytes += s.bytes;
    tensors.push_back(std::move(s));
  }
  a.tensors = std::move(tensors);
  for (auto& [k, g] : groups) a.groups.push_back(std::move(g));
  a.total = a.main.total();
  a.mtp_total = a.mtp.total();
  a.n_moe_layers = static_cast<int64_t>(routed_by_layer.size());
  int64_t routed_active = 0;
  for (const auto& [layer, n] : routed_by_layer) routed_active += t.n_expert > 0 ? n / t.n_expert * t.top_k : n;
  // As model::inspect_params: a text token runs no vision tower or projector.
  a.activated = a.total - a.main.routed_experts - a.main.vision - a.main.projector + routed_active;
  if (source == Source::kConfig)
    a.notes.push_back("parameters and bytes are an estimate from config.json (no weight index or headers)");
  if (source == Source::kIndexNames)
    a.notes.push_back("tensor names from the weight index; shapes derived from config.json (shards absent)");
  if (a.unknown_tensors > 0)
    a.notes.push_back(std::to_string(a.unknown_tensors) + " tensor(s) no rule explains (" +
                      std::to_string(a.unknown_bytes) + " bytes), counted under other");
  add_features(a, config);
  add_provenance(a, config, code);
  return a;
}

Result<Analysis> analyze_path(const std::string& path, const checkpoint::Catalog* opened, const std::string& modeling) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const std::string config_path = dir ? (fs::path(path) / "config.json").string() : path;
  DZ_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(config_path));
  // The folder's own configuration_*.py / modeling_*.py (beside a config.json given alone too).
  const fs::path folder = dir ? fs::path(path) : fs::path(config_path).parent_path();
  DZ_ASSIGN_OR_RETURN(FolderCode code, read_folder_code(folder.empty() ? "." : folder.string()));
  if (!modeling.empty()) DZ_RETURN_IF_ERROR(read_modeling_path(modeling, code));
  if (!dir) return analyze(config, {}, Source::kConfig, &code);
  const fs::path index = fs::path(path) / checkpoint::kIndexFileName;
  const bool has_index = fs::exists(index, ec), has_single = fs::exists(fs::path(path) / checkpoint::kSingleFileName, ec);
  if (!has_index && !has_single) return analyze(config, {}, Source::kConfig, &code);
  std::optional<Result<checkpoint::Catalog>> catalog;
  const checkpoint::Catalog* cat = opened;
  if (!cat) {
    catalog.emplace(checkpoint::Catalog::open(path));
    if (catalog->ok()) cat = &**catalog;
  }
  if (cat) {
    std::vector<TensorInfo> ts;
    ts.reserve(cat->tensors().size());
    for (const auto& x : cat->tensors()) ts.push_back({x.name, x.shape, dtype_name(x.dtype), x.nbytes});
    DZ_ASSIGN_OR_RETURN(Analysis a, analyze(config, std::move(ts), Source::kHeaders, &code));
    a.index_total_size = cat->total_bytes();
    return a;
  }
  // An index whose shards are absent (a published index alone): names from the index.
  if (!has_index || (*catalog).status().code() != StatusCode::kNotFound) return (*catalog).status();
  DZ_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(index.string()));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return Status::Corrupt(index.string() + ": key 'weight_map' must be an object");
  DZ_ASSIGN_OR_RETURN(ModelDims dims, read_dims(config, &code));
  std::vector<TensorInfo> ts;
  for (const auto& [name, file] : j["weight_map"].items()) ts.push_back({name, shape_from_name(name, dims).value_or(Shape{}), "", 0});
  DZ_ASSIGN_OR_RETURN(Analysis a, analyze(config, std::move(ts), Source::kIndexNames, &code));
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size") &&
      j["metadata"]["total_size"].is_number_unsigned())
    a.index_total_size = j["metadata"]["total_size"].get<uint64_t>();
  for (const auto& x : a.tensors)
    if (x.shape.empty()) {
      a.notes.push_back("no shape rule for " + x.name + " (and others of its kind): counted as 0");
      break;
    }
  cross_check_index(a, config, &code);
  return a;
}

namespace {

nlohmann::json components_json(const model::ComponentParams& c) {
  return {{"embedding", c.embedding},   {"attention", c.attention}, {"dense_mlp", c.dense_mlp},
          {"routed_experts", c.routed_experts}, {"shared_experts", c.shared_experts}, {"router", c.router},
          {"norms", c.norms},           {"lm_head", c.lm_head},     {"vision", c.vision},
          {"mtp_head", c.mtp_head},     {"other", c.other},         {"total", c.total()}};
}

}  // namespace

nlohmann::json to_json(const Analysis& a) {
  const TextDims& t = a.dims.text;
  nlohmann::json j;
  j["model_type"] = a.dims.model_type;
  j["architecture"] = a.dims.architecture;
  j["adapter"] = a.adapter;
  j["source"] = source_name(a.source);
  j["text"] = {{"model_type", t.model_type}, {"layers", t.n_layer},    {"hidden", t.hidden},
               {"heads", t.n_head},          {"kv_heads", t.n_head_kv}, {"head_dim", t.head_dim},
               {"vocab", t.vocab},           {"experts", t.n_expert},   {"experts_per_token", t.top_k},
               {"moe_layers", a.n_moe_layers}, {"mtp_layers", t.n_mtp}};
  if (a.dims.vision)
    j["vision"] = {{"model_type", a.dims.vision->model_type}, {"layers", a.dims.vision->n_layer},
                   {"hidden", a.dims.vision->hidden}};
  j["parameters"] = components_json(a.main);
  j["parameters"]["mtp"] = components_json(a.mtp);
  j["parts"] = a.parts;
  j["total"] = a.total;
  j["mtp_total"] = a.mtp_total;
  j["activated"] = a.activated;
  j["weight_bytes"] = a.weight_bytes;
  j["index_total_size"] = a.index_total_size;
  j["scale_tensors"] = a.scale_tensors;
  j["quantization"] = {{"method", a.dims.quant_method}, {"detail", a.dims.quant_detail}};
  j["torch_dtype"] = a.dims.torch_dtype;
  nlohmann::json g = nlohmann::json::array();
  for (const auto& x : a.groups)
    g.push_back({{"template", x.tmpl}, {"part", x.part}, {"component", model::component_name(x.component)},
                 {"tensors", x.tensors}, {"params", x.params}, {"bytes", x.bytes}});
  j["groups"] = g;
  nlohmann::json f = nlohmann::json::array();
  for (const auto& x : a.features)
    f.push_back({{"name", x.name}, {"detail", x.detail}, {"evidence", x.evidence},
                 {"status", feature_status_name(x.status)}, {"block", x.block}, {"key", x.key}, {"proof", x.proof}});
  j["features"] = f;
  j["precision"] = a.precision;
  j["notes"] = a.notes;
  // What each figure rests on (provenance.cpp) and the risk register.
  nlohmann::json basis = nlohmann::json::object();
  for (const auto& [part, b] : a.basis) basis[part] = {{"kind", b.kind}, {"detail", b.detail}};
  j["basis"] = basis;
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& [k, o] : a.dims.origins)
    if (o.from != KeyFrom::kConfig) keys[k] = {{"from", key_from_name(o.from)}, {"detail", o.detail}, {"value", o.value}};
  j["key_sources"] = keys;
  j["defaults_table"] = {{"transformers_version", defaults_table_version()}, {"text_class", a.dims.text_class}};
  j["risks"] = a.risks;
  j["transformers_version"] = a.transformers_version;
  j["auto_map"] = a.auto_map;
  nlohmann::json code = nlohmann::json::array();
  for (const auto& m : a.modeling) {
    nlohmann::json mods = nlohmann::json::array();
    for (const auto& x : m.modules)
      mods.push_back({{"name", x.name}, {"kind", x.kind}, {"base", x.base}, {"line", x.line},
                      {"matched", !x.block.empty()}, {"block", x.block}, {"how", x.how}, {"hint", x.hint}});
    code.push_back({{"file", m.file}, {"imports", m.imports}, {"classes", m.classes}, {"modules", mods}});
  }
  j["modeling"] = code;
  // Every config key under one of three headings.
  nlohmann::json keys_j = {{"understood", nlohmann::json::object()}, {"irrelevant", nlohmann::json::object()},
                           {"unrecognised", nlohmann::json::object()}};
  for (const auto& k : a.keys) keys_j[key_class_name(k.cls)][k.key] = {{"what", k.what}, {"value", k.value}};
  j["keys"] = keys_j;
  j["closest"] = a.closest;
  return j;
}

void print_features(std::ostream& o, const Analysis& a) {
  o << "features    (generic analysis)\n";
  for (const auto& f : a.features)
    o << "  " << std::left << std::setw(34) << f.name << std::setw(22) << feature_status_name(f.status) << f.block
      << "\n      " << f.detail << (f.detail.empty() ? "" : "; ") << "evidence: " << f.evidence
      << (f.proof.empty() ? "" : "; proof: " + f.proof) << "\n" << std::right;
  if (!a.closest.empty()) o << "closest     " << a.closest.substr(a.closest.rfind("closest: ", 0) == 0 ? 9 : 0) << "\n";
  if (!a.precision.empty()) {
    o << "precision-sensitive\n";
    for (const auto& p : a.precision) o << "  " << p << "\n";
  }
}

void print_text(std::ostream& o, const Analysis& a) {
  const TextDims& t = a.dims.text;
  o << "model_type  " << a.dims.model_type << " (" << a.dims.architecture << "), "
    << (a.adapter.empty() ? "no adapter: generic analysis" : "adapter " + a.adapter) << "\n"
    << "source      " << source_name(a.source) << "\n"
    << "text        " << t.n_layer << " layers";
  if (t.n_expert > 0) o << " (" << t.n_layer - a.n_moe_layers << " dense, " << a.n_moe_layers << " MoE)";
  o << ", hidden " << t.hidden << ", heads " << t.n_head << "/" << t.n_head_kv << ", vocab " << t.vocab << "\n";
  if (t.n_expert > 0)
    o << "experts     " << t.n_expert << " routed (top-" << t.top_k << ", ffn " << t.moe_ff << ")"
      << (t.n_shared ? ", " + std::to_string(t.n_shared) + " shared" : "")
      << (t.shared_ff ? ", gated shared ffn " + std::to_string(t.shared_ff) : "") << "\n";
  if (a.dims.vision)
    o << "vision      " << a.dims.vision->model_type << ": " << a.dims.vision->n_layer << " layers, hidden "
      << a.dims.vision->hidden << "\n";
  o << "parameters  by part" << (a.source == Source::kConfig ? " (estimate)" : "") << "\n";
  for (const auto& [part, n] : a.parts)
    if (n > 0)
      o << "  " << std::left << std::setw(26) << part << std::right << std::setw(20) << model::grouped_count(n) << "  "
        << model::human_count(static_cast<double>(n)) << "\n";
  o << "  total (main)              " << std::setw(20) << model::grouped_count(a.total) << "  " << model::human_count(static_cast<double>(a.total))
    << "\n  activated/token           " << std::setw(20) << model::grouped_count(a.activated) << "  "
    << model::human_count(static_cast<double>(a.activated)) << "\n";
  if (a.mtp_total > 0)
    o << "  mtp (apart)               " << std::setw(20) << model::grouped_count(a.mtp_total) << "  "
      << model::human_count(static_cast<double>(a.mtp_total)) << "\n";
  o << "bytes       " << model::grouped_count(static_cast<int64_t>(a.weight_bytes)) << " ("
    << (a.source == Source::kHeaders ? "headers" : "from " + (a.dims.torch_dtype.empty() ? std::string("bf16") : a.dims.torch_dtype))
    << (a.dims.quant_bits > 0 && a.source != Source::kHeaders
            ? "; quantized Linears " + std::to_string(a.dims.quant_bits) + "-bit packed in int32 + bf16 scales per " +
                  std::to_string(a.dims.quant_group)
            : std::string())
    << (a.dims.mxfp4 && a.source != Source::kHeaders ? "; MXFP4 experts 0.5 B per weight + 1 B scale per 32" : "")
    << ")";
  if (a.index_total_size) o << ", index total_size " << model::grouped_count(static_cast<int64_t>(a.index_total_size));
  o << "\nquantization " << (a.dims.quant_method.empty() ? "none" : a.dims.quant_method + " " + a.dims.quant_detail)
    << "\nlayer template (" << a.groups.size() << " groups)\n";
  for (const auto& g : a.groups)
    o << "  " << std::left << std::setw(72) << g.tmpl << std::setw(26) << g.part << std::right << std::setw(8)
      << g.tensors << " " << std::setw(16) << model::grouped_count(g.params) << "\n";
  print_features(o, a);
  for (const auto& n : a.notes) o << "note        " << n << "\n";
  print_provenance(o, a);
}

void print_provenance(std::ostream& o, const Analysis& a) {
  if (!a.basis.empty()) o << "basis       what each part's count rests on\n";
  for (const auto& [part, b] : a.basis)
    o << "  " << std::left << std::setw(26) << part << std::setw(13) << b.kind << std::right << b.detail << "\n";
  o << "defaults    transformers " << defaults_table_version() << " table"
    << (a.dims.text_class.empty() ? ": no class for model_type " + a.dims.text.model_type : ", class " + a.dims.text_class);
  if (!a.transformers_version.empty()) o << "; config written by transformers " << a.transformers_version;
  o << "\n";
  for (const auto& m : a.auto_map) o << "auto_map    " << m << "\n";
  for (const auto& m : a.modeling) {
    std::string imports;
    for (const auto& i : m.imports) imports += (imports.empty() ? "" : ", ") + i;
    size_t matched = 0;
    for (const auto& x : m.modules) matched += !x.block.empty();
    o << "code        " << m.file << ": imports " << (imports.empty() ? "none" : imports) << "; " << m.classes.size()
      << " classes; " << m.modules.size() << " modules and functions, " << matched << " matched to a block, "
      << m.modules.size() - matched << " unmatched\n";
    for (const auto& x : m.modules)
      if (!x.block.empty()) o << "  matched   " << m.file << ":" << x.line << " " << x.name << " -> " << x.block << "\n";
  }
  size_t n[3] = {0, 0, 0};
  for (const auto& k : a.keys) n[static_cast<int>(k.cls)] += 1;
  o << "keys        " << a.keys.size() << " in config.json: " << n[0] << " understood, " << n[1] << " irrelevant, " << n[2]
    << " unrecognised\n";
  for (const auto& k : a.keys)
    if (k.cls == KeyClass::kUnrecognised) o << "unrecognised " << k.key << " = " << k.value << ": " << k.what << "\n";
  for (const auto& r : a.risks) o << "risk        " << r << "\n";
}

}  // namespace dayzero::analysis
