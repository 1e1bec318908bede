// Parameter counts by component and the feature list, from tensor specs and config.json.
// Components come from each spec's `component` (set where the spec is declared), never from
// its name; multi-token-prediction layers are the specs past n_layer.
#include "model/inspect.h"

#include <sstream>

#include "core/dtype.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

std::string fmt_num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// safetensors dtype name of config.json's torch_dtype.
std::string stored_dtype(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return "BF16";
  if (torch_dtype == "float16") return "F16";
  if (torch_dtype == "float32") return "F32";
  return torch_dtype.empty() ? "BF16" : torch_dtype;
}

size_t stored_size(const std::string& name) {
  if (auto t = parse_dtype(name)) return dtype_size(*t);
  return 2;
}

}  // namespace

int64_t& component_slot(ComponentParams& c, Component k) {
  switch (k) {
    case Component::kEmbedding: return c.embedding;
    case Component::kAttention: return c.attention;
    case Component::kMlp: return c.dense_mlp;
    case Component::kRoutedExpert: return c.routed_experts;
    case Component::kSharedExpert: return c.shared_experts;
    case Component::kRouter: return c.router;
    case Component::kNorm: return c.norms;
    case Component::kLmHead: return c.lm_head;
    case Component::kVision: return c.vision;
    case Component::kProjector: return c.projector;
    case Component::kMtpHead: return c.mtp_head;
    case Component::kUnknown:
    case Component::kQuantScale: break;
  }
  return c.other;
}

std::string grouped_count(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string human_count(double v) {
  const char* unit[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char b[32];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f%s" : "%.2f%s", v, unit[u]);
  return b;
}

namespace {

std::vector<Feature> features_of(const HParams& hp, const std::vector<TensorSpec>& specs, const nlohmann::json& c,
                                 const ParamReport& r) {
  std::vector<Feature> f;
  using S = Support;
  const std::string heads = std::to_string(hp.n_head) + " q / " + std::to_string(hp.n_head_kv) + " kv heads";
  const DeepSeekParams* ds = std::get_if<DeepSeekParams>(&hp.family_params);
  const DeepseekV4Params* v4 = std::get_if<DeepseekV4Params>(&hp.family_params);
  if (v4) {
    // Run where the adapter's forward pass takes the config (not the UE8M0-scaled FP8 weights yet).
    const auto adapter = find_adapter_by_family(hp.family);
    const S run = adapter.ok() && (*adapter)->forward_support(hp).ok() ? S::kYes : S::kNo;
    int n_sliding = 0, n_csa = 0, n_hca = 0, n_hash = 0;
    for (const V4Attention t : v4->layer_types)
      (t == V4Attention::kSliding ? n_sliding : t == V4Attention::kCompressedSparse ? n_csa : n_hca)++;
    for (const bool h : v4->hash_moe) n_hash += h ? 1 : 0;
    const auto n = [](int64_t x) { return std::to_string(x); };
    f.push_back({"mHC", n(v4->hc_mult) + " residual streams, Sinkhorn-Knopp " + n(v4->hc_sinkhorn_iters) + " iterations",
                 run});
    f.push_back({"hybrid attention", n(n_sliding) + " sliding, " + n(n_csa) + " compressed sparse (1 entry per " +
                                         n(v4->csa_rate) + " tokens, indexer top-" + n(v4->index_topk) + "), " +
                                         n(n_hca) + " heavily compressed (1 per " + n(v4->hca_rate) + "); window " +
                                         n(v4->sliding_window),
                 run});
    f.push_back({"K=V MQA", heads + " of " + n(hp.head_dim) + ", q LoRA " + n(v4->q_lora_rank) +
                                       ", attention sinks, rotary on the last " + n(v4->rope_dim) + " channels",
                 run});
    f.push_back({"grouped o-proj", n(v4->o_groups) + " groups of rank " + n(v4->o_lora_rank), run});
    f.push_back({"RoPE", "theta " + fmt_num(hp.rope_theta) + " (sliding), " + fmt_num(v4->compress_rope_theta) +
                             " (compressed" + (hp.rope_scaling.type == "yarn" ? ", yarn x" + fmt_num(hp.rope_scaling.factor) : "") +
                             ")",
                 run});
    f.push_back({"MoE " + v4->scoring_func,
                 "top-" + n(hp.n_expert_used) + " of " + n(hp.n_expert) + " experts, " + n(n_hash) +
                     " hash-routed layers (tid2eid), scaling " + fmt_num(v4->routed_scaling_factor) + ", " +
                     n(v4->n_shared_experts) + " shared, SwiGLU clamp " + fmt_num(hp.swiglu_limit),
                 run});
  } else if (ds && ds->mla.kv_lora_rank > 0) {
    const MlaParams& m = ds->mla;
    f.push_back({"MLA", "q_lora " + std::to_string(m.q_lora_rank) + ", kv_lora " + std::to_string(m.kv_lora_rank) +
                            ", qk " + std::to_string(m.qk_nope_head_dim) + "+" + std::to_string(m.qk_rope_head_dim) +
                            " (rope), v " + std::to_string(m.v_head_dim) + ", " + std::to_string(hp.n_head) + " heads",
                 S::kYes});
    if (ds->dsa.index_topk > 0)
      f.push_back({"DSA indexer", "top " + std::to_string(ds->dsa.index_topk) + " keys per query, " +
                                      std::to_string(ds->dsa.index_n_heads) + " heads x " +
                                      std::to_string(ds->dsa.index_head_dim),
                   S::kYes});
  } else if (hp.n_head_kv == 1) {
    f.push_back({"MQA", heads, S::kYes});
  } else if (hp.n_head_kv < hp.n_head) {
    f.push_back({"GQA", heads, S::kYes});
  } else {
    f.push_back({"MHA", heads, S::kYes});
  }
  if (hp.rope_scaling.type != "default" && !v4)
    f.push_back({"RoPE scaling", hp.rope_scaling.type + " x" + fmt_num(hp.rope_scaling.factor) + " over " +
                                     std::to_string(hp.rope_scaling.original_max_position_embeddings) + " positions",
                 S::kYes});
  if (hp.qk_norm) f.push_back({"q/k norm", "per-head RMSNorm of q and k", S::kYes});
  if (hp.attn_qkv_bias || hp.attn_out_bias)
    f.push_back({"attention bias", hp.attn_out_bias ? "q/k/v/o" : "q/k/v", S::kYes});
  if (hp.mlp_bias) f.push_back({"MLP bias", "gate/up/down", S::kYes});
  if (hp.n_expert > 0 && !v4) {
    const std::string experts = "top-" + std::to_string(hp.n_expert_used) + " of " + std::to_string(hp.n_expert) +
                                " experts in " + std::to_string(r.n_moe_layers) + " of " +
                                std::to_string(hp.n_layer) + " layers";
    if (ds) {
      const GroupRouting& g = ds->routing;
      f.push_back({"MoE sigmoid routing", experts + ", selection bias, scaling " + fmt_num(g.routed_scaling_factor),
                   S::kYes});
      if (g.n_group > 1)
        f.push_back({"group-limited routing",
                     std::to_string(g.topk_group) + " of " + std::to_string(g.n_group) + " groups", S::kYes});
      if (g.n_shared_experts > 0)
        f.push_back({"shared experts", std::to_string(g.n_shared_experts) + " x " + std::to_string(hp.n_ff_expert),
                     S::kYes});
    } else {
      f.push_back({"MoE softmax routing", experts + (hp.norm_topk_prob ? ", renormalised" : ""), S::kYes});
    }
  }
  int64_t packed = 0, group = 0, fp4 = 0;
  const StoredFormat* fp4_format = nullptr;
  bool fp4_in_place = false;
  for (const auto& s : specs) {
    if (is_stored_weight(s, StoredScheme::kInt4Group)) ++packed, group = s.stored.block_cols;
    if (is_stored_weight(s) && is_fp4(s.stored.format->scheme))
      ++fp4, fp4_format = s.stored.format, fp4_in_place = s.stored.placement == StoredPlacement::kOwnName;
  }
  if (fp4 > 0) {
    f.push_back({"FP4 weights",
                 std::to_string(fp4) + " routed-expert weights (" + (fp4_in_place ? "in place, " : "compressed-tensors ") +
                     fp4_format->name +
                     ": E2M1, a scale per " + std::to_string(fp4_format->block_cols) +
                     "), kept as stored on the CPU (as_stored), else dequantized to f32 at load",
                 S::kYes});
  } else if (packed > 0) {
    f.push_back({"INT4 weights",
                 std::to_string(packed) + " Linear weights (compressed-tensors, groups of " + std::to_string(group) +
                     "), dequantized to f32 at load",
                 S::kYes});
  } else if (!r.quant_method.empty()) {
    bool declared = false;
    for (const auto& s : specs) declared = declared || is_stored_weight(s, StoredScheme::kFp8Block);
    const std::string what = r.quant_method + (r.quant_fmt.empty() ? "" : " " + r.quant_fmt) +
                             (r.quant_block_rows > 0 ? " " + std::to_string(r.quant_block_rows) + "x" +
                                                           std::to_string(r.quant_block_cols) + " blocks"
                                                     : "");
    f.push_back({"FP8 block scales",
                 declared ? what + ", dequantized to f32 at load"
                          : what + ": the " + hp.family + " adapter declares no scale tensors",
                 declared ? S::kYes : S::kNo});
  }
  if (hp.tie_embeddings) f.push_back({"tied embeddings", "lm_head = embed_tokens", S::kYes});
  if (hp.n_nextn_layer > 0)
    f.push_back({"MTP", std::to_string(hp.n_nextn_layer) + " multi-token-prediction layer(s), checked, never run",
                 S::kSkipped});
  const auto use_sw = c.find("use_sliding_window");
  const bool sliding = c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
                       (use_sw == c.end() || !use_sw->is_boolean() || use_sw->get<bool>());
  if (sliding && !v4) f.push_back({"sliding window", std::to_string(c["sliding_window"].get<int64_t>()), S::kNo});
  if (hp.vision.enabled)
    f.push_back({"vision tower", std::to_string(hp.vision.n_layer_run) + " of " + std::to_string(hp.vision.n_layer) +
                                     " encoder layers run (the feature layer), tower and projector on the first stage",
                 S::kYes});
  else if (c.contains("vision_config") && c["vision_config"].is_object())
    f.push_back({"vision tower", "", S::kNo});
  return f;
}

}  // namespace

const char* support_name(Support s) {
  switch (s) {
    case Support::kYes: return "supported";
    case Support::kNo: return "unsupported";
    case Support::kSkipped: return "skipped";
  }
  return "?";
}

std::string stored_dtype_name(const TensorSpec& s, const ParamReport& r) {
  auto ends = [&](const char* x) {
    const std::string t(x);
    return s.name.size() >= t.size() && s.name.compare(s.name.size() - t.size(), t.size(), t) == 0;
  };
  if (s.stored.format && s.component == Component::kQuantScale) {  // FP4 storage (compressed-tensors)
    if (ends(".weight_packed")) return "U8";
    if (ends(".weight_scale")) return s.stored.format->scale == ScaleKind::kE4M3 ? "F8_E4M3" : "U8";
    return "F32";  // the NVFP4 global scale
  }
  if (ends(".weight_packed") || ends(".weight_shape")) return "I32";  // INT4 pack-quantized storage
  if (ends(".weight_scale") && s.component == Component::kQuantScale) return "BF16";
  if (s.component == Component::kQuantScale) return "F32";
  if (s.index_range > 0) return "I32";
  if (is_stored_weight(s, StoredScheme::kFp8Block)) return r.quant_fmt == "e5m2" ? "F8_E5M2" : "F8_E4M3";
  return stored_dtype(r.torch_dtype);
}

ParamReport inspect_params(const HParams& hp, const std::vector<TensorSpec>& specs, const nlohmann::json& config,
                           const checkpoint::Catalog* catalog) {
  ParamReport r;
  if (config.contains("torch_dtype") && config["torch_dtype"].is_string())
    r.torch_dtype = config["torch_dtype"].get<std::string>();
  // A multimodal config carries its text model's quantization in text_config (Kimi-K2.5).
  const nlohmann::json* qc = nullptr;
  if (config.contains("quantization_config") && config["quantization_config"].is_object())
    qc = &config["quantization_config"];
  else if (config.contains("text_config") && config["text_config"].is_object() &&
           config["text_config"].contains("quantization_config") &&
           config["text_config"]["quantization_config"].is_object())
    qc = &config["text_config"]["quantization_config"];
  if (qc) {
    const auto& q = *qc;
    if (q.contains("format") && q["format"].is_string()) r.quant_fmt = q["format"].get<std::string>();
    // Reported as found: a value of the wrong type reads as absent (the adapter's parse refuses it).
    if (q.contains("quant_method") && q["quant_method"].is_string()) r.quant_method = q["quant_method"].get<std::string>();
    if (q.contains("fmt") && q["fmt"].is_string()) r.quant_fmt = q["fmt"].get<std::string>();
    if (q.contains("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2 &&
        q["weight_block_size"][0].is_number_integer() && q["weight_block_size"][1].is_number_integer()) {
      r.quant_block_rows = q["weight_block_size"][0].get<int64_t>();
      r.quant_block_cols = q["weight_block_size"][1].get<int64_t>();
    }
  }

  std::map<int, int64_t> routed_by_layer;
  for (const auto& s : specs) {
    const int64_t n = shape_numel(s.shape);
    const bool scale = s.component == Component::kQuantScale;
    // A 4-bit weight (INT4, FP4) is counted as its companions or codes.
    if (!catalog && !(is_stored_weight(s) && s.stored.format->value_bits == 4)) {
      const std::string dt = stored_dtype_name(s, r);
      DTypeCount& d = r.dtypes[dt];
      d.tensors += 1;
      d.elements += n;
      d.bytes += static_cast<uint64_t>(n) * stored_size(dt);
      r.weight_bytes += static_cast<uint64_t>(n) * stored_size(dt);
    }
    if (scale) {
      r.scale_tensors += 1;
      const checkpoint::TensorInfo* t = catalog ? catalog->find(s.name) : nullptr;
      r.scale_bytes += t ? t->nbytes : static_cast<uint64_t>(n) * (s.stored.format ? stored_size(stored_dtype_name(s, r)) : 4);
      continue;
    }
    const bool mtp = s.layer >= hp.n_layer;
    component_slot(mtp ? r.mtp : r.main, s.component) += n;
    if (mtp) continue;
    if (s.component == Component::kRoutedExpert) routed_by_layer[s.layer] += n;
    if (is_stored_weight(s)) r.quantized_params += n;
  }
  if (catalog) {
    r.dtype_source = "checkpoint";
    for (const auto& t : catalog->tensors()) {
      DTypeCount& d = r.dtypes[dtype_name(t.dtype)];
      d.tensors += 1;
      d.elements += shape_numel(t.shape);
      d.bytes += t.nbytes;
    }
    r.weight_bytes = catalog->total_bytes();
  }
  r.total = r.main.total();
  r.mtp_total = r.mtp.total();
  r.n_moe_layers = static_cast<int64_t>(routed_by_layer.size());
  // Each layer's experts are the same size, so k / n_expert of them is exact.
  int64_t routed_active = 0;
  for (const auto& [layer, n] : routed_by_layer) routed_active += n / hp.n_expert * hp.n_expert_used;
  // A text token runs no vision tower or projector (they run once per image, on its patches).
  r.activated = r.total - r.main.routed_experts - r.main.vision - r.main.projector + routed_active;
  r.activated_no_embedding = r.activated - (hp.tie_embeddings ? 0 : r.main.embedding);
  r.features = features_of(hp, specs, config, r);
  return r;
}

namespace {

nlohmann::json components_json(const ComponentParams& c) {
  return {{"embedding", c.embedding},
          {"attention", c.attention},
          {"dense_mlp", c.dense_mlp},
          {"routed_experts", c.routed_experts},
          {"shared_experts", c.shared_experts},
          {"router", c.router},
          {"norms", c.norms},
          {"lm_head", c.lm_head},
          {"vision", c.vision},
          {"projector", c.projector},
          {"mtp_head", c.mtp_head},
          {"other", c.other},
          {"total", c.total()}};
}

}  // namespace

nlohmann::json to_json(const ParamReport& r) {
  nlohmann::json j;
  j["parameters"] = components_json(r.main);
  j["parameters"]["mtp"] = components_json(r.mtp);
  j["total"] = r.total;
  j["mtp_total"] = r.mtp_total;
  j["activated"] = r.activated;
  j["activated_no_embedding"] = r.activated_no_embedding;
  j["moe_layers"] = r.n_moe_layers;
  j["torch_dtype"] = r.torch_dtype;
  j["quantization"] = {{"method", r.quant_method},
                       {"fmt", r.quant_fmt},
                       {"block", {r.quant_block_rows, r.quant_block_cols}},
                       {"quantized_params", r.quantized_params},
                       {"scale_tensors", r.scale_tensors},
                       {"scale_bytes", r.scale_bytes}};
  j["dtype_source"] = r.dtype_source;
  nlohmann::json d = nlohmann::json::object();
  for (const auto& [name, c] : r.dtypes) d[name] = {{"tensors", c.tensors}, {"elements", c.elements}, {"bytes", c.bytes}};
  j["dtypes"] = d;
  j["weight_bytes"] = r.weight_bytes;
  nlohmann::json f = nlohmann::json::array();
  for (const auto& x : r.features)
    f.push_back({{"name", x.name}, {"detail", x.detail}, {"support", support_name(x.support)}});
  j["features"] = f;
  return j;
}

}  // namespace dayzero::model
