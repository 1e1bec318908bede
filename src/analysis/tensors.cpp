// Tensor names <-> shapes and components (analysis.h): one table of name rules gives the shape
// of a tensor from the dims (used for the config estimate and for index-only checkpoints) and
// what it is (component, finer part, layer). Names follow Hugging Face's conventions of the
// published families; a name no rule knows is kUnknown and reported with its bytes.
#include <cctype>
#include <cmath>
#include <map>
#include <regex>

#include "analysis/analysis.h"

namespace dayzero::analysis {
namespace {

bool ends(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

struct Split {
  std::string scope;  // "text", "vision", "projector", "mtp"
  int64_t layer = -1;
  std::string rest;   // the name after "layers.N." (or the whole tail outside layers)
};

bool is_vision(const std::string& n) {
  return has(n, "vision_tower") || has(n, "visual.") || has(n, "vision_model") || n.rfind("vision.", 0) == 0 ||
         has(n, ".vision.") || has(n, "multi_modal_projector") || has(n, "mm_projector");
}
bool is_projector(const std::string& n) {
  return has(n, "multi_modal_projector") || has(n, "mm_projector") || has(n, "merger.");
}

Split split(const std::string& n, const TextDims& t) {
  Split s;
  s.scope = is_vision(n) ? (is_projector(n) ? "projector" : "vision") : "text";
  for (const char* key : {"layers.", "blocks.", "layer."}) {
    size_t p = 0;
    while ((p = n.find(key, p)) != std::string::npos) {
      if (p > 0 && n[p - 1] != '.') { ++p; continue; }
      size_t q = p + std::string(key).size(), e = q;
      while (e < n.size() && std::isdigit(static_cast<unsigned char>(n[e]))) ++e;
      if (e > q && e < n.size() && n[e] == '.') {
        s.layer = std::stoll(n.substr(q, e - q));
        s.rest = n.substr(e + 1);
        break;
      }
      ++p;
    }
    if (s.layer >= 0) break;
  }
  if (s.layer < 0) {
    const size_t dot = n.rfind('.', n.size() > 7 && ends(n, ".weight") ? n.size() - 8 : std::string::npos);
    s.rest = dot == std::string::npos ? n : n.substr(dot + 1);
  }
  if (s.scope == "text" && (n.rfind("mtp.", 0) == 0 || has(n, ".mtp.") || (s.layer >= t.n_layer))) s.scope = "mtp";
  return s;
}

// Two-dimensional Linear [out, in] with an optional bias [out].
std::optional<Shape> linear(const std::string& rest, int64_t out, int64_t in) {
  if (ends(rest, ".bias")) return Shape{out};
  return Shape{out, in};
}

std::optional<Shape> text_shape(const std::string& r, const TextDims& t, bool in_layer, int64_t layer) {
  const int64_t d = t.hidden, H = t.n_head, KV = t.n_head_kv, hd = t.head_dim;
  const bool mla = t.kv_lora > 0;
  const int64_t qk = mla ? t.qk_nope + t.qk_rope : hd;
  // DeepSeek-V4's hyper-connections: fn [(2 + N) N, N hidden], base [(2 + N) N], scale [3] per
  // block; the head's hc_fn [N, N hidden], hc_base [N], hc_scale [1].
  if (t.hc_mult > 0 && (has(r, "attn_hc.") || has(r, "ffn_hc.") || has(r, "hc_head."))) {
    const int64_t N = t.hc_mult, mix = (2 + N) * N;
    if (ends(r, "hc_fn")) return Shape{N, N * d};
    if (ends(r, "hc_base")) return Shape{N};
    if (ends(r, "hc_scale")) return Shape{1};
    if (ends(r, ".fn")) return Shape{mix, N * d};
    if (ends(r, ".base")) return Shape{mix};
    if (ends(r, ".scale")) return Shape{3};
    return std::nullopt;
  }
  if (!in_layer) {
    if (ends(r, "embed_tokens.weight") || r == "lm_head.weight" || ends(r, "lm_head.weight")) return Shape{t.vocab, d};
    if (ends(r, "lm_head.bias")) return Shape{t.vocab};
    if (ends(r, "fc.weight")) return Shape{d, 2 * d};  // mtp.fc
    if (ends(r, "norm.weight") || ends(r, "norm.bias")) return Shape{d};
    return std::nullopt;
  }
  // DeepSeek-V4: shared-KV attention with a grouped low-rank output, and the compressors of its
  // compressed layer kinds (CSA: 2 x head_dim series and an indexer; HCA: one series).
  if (t.o_groups > 0 && has(r, "self_attn.")) {
    const std::string kind = t.compressed_kind(layer);
    const int64_t ihd = t.index_head_dim, ih = t.index_heads;
    if (has(r, "compressor.indexer.")) {
      if (has(r, "kv_proj") || has(r, "gate_proj")) return Shape{2 * ihd, d};
      if (ends(r, "position_bias")) return Shape{t.csa_rate, 2 * ihd};
      if (has(r, "kv_norm")) return Shape{ihd};
      if (has(r, "q_b_proj")) return Shape{ih * ihd, t.q_lora};
      if (has(r, "weights_proj")) return Shape{ih, d};
      return std::nullopt;
    }
    if (has(r, "compressor.")) {
      const int64_t w = kind == "csa" ? 2 * hd : hd, rate = kind == "csa" ? t.csa_rate : t.hca_rate;
      if (has(r, "kv_proj") || has(r, "gate_proj")) return Shape{w, d};
      if (ends(r, "position_bias")) return Shape{rate, w};
      if (has(r, "kv_norm")) return Shape{hd};
      return std::nullopt;
    }
    if (has(r, "q_a_proj")) return Shape{t.q_lora, d};
    if (has(r, "q_a_norm")) return Shape{t.q_lora};
    if (has(r, "q_b_proj")) return Shape{H * hd, t.q_lora};
    if (has(r, "kv_proj")) return Shape{hd, d};
    if (has(r, "kv_norm")) return Shape{hd};
    if (has(r, "o_a_proj")) return Shape{t.o_groups * t.o_lora, H * hd / t.o_groups};
    if (has(r, "o_b_proj")) return Shape{d, t.o_groups * t.o_lora};
    if (ends(r, "sinks")) return Shape{H};
    return std::nullopt;
  }
  // Kimi Delta Attention (KimiLinearDeltaAttention) on the linear layers.
  if (t.kda_heads > 0 && t.is_linear_layer(layer) && has(r, "self_attn.")) {
    const int64_t hk = t.kda_head_dim, qkv = t.kda_heads * hk;
    if (has(r, "q_proj") || has(r, "k_proj") || has(r, "v_proj")) return Shape{qkv, d};
    if (has(r, "conv1d")) return Shape{3 * qkv, 1, t.lin_conv};
    if (has(r, "f_a_proj") || has(r, "g_a_proj")) return Shape{hk, d};
    if (has(r, "f_b_proj") || has(r, "g_b_proj")) return Shape{qkv, hk};
    if (ends(r, "dt_bias")) return Shape{qkv};
    if (ends(r, "A_log")) return Shape{1, 1, t.kda_heads, 1};
    if (has(r, "b_proj")) return Shape{t.kda_heads, d};
    if (has(r, "o_norm")) return Shape{hk};
    if (has(r, "o_proj")) return Shape{d, qkv};
    return std::nullopt;
  }
  // Sparse-attention indexer (DSA)
  if (has(r, "indexer.")) {
    if (has(r, "wq_b")) return Shape{t.index_heads * t.index_head_dim, t.q_lora};
    if (has(r, "wk.")) return Shape{t.index_head_dim, d};
    if (has(r, "k_norm")) return Shape{t.index_head_dim};
    if (has(r, "weights_proj")) return Shape{t.index_heads, d};
    return std::nullopt;
  }
  // Gated DeltaNet linear attention
  if (has(r, "linear_attn.")) {
    const int64_t kd = t.lin_k_heads * t.lin_k_dim, vd = t.lin_v_heads * t.lin_v_dim, vh = t.lin_v_heads;
    if (has(r, "in_proj_qkvz")) return Shape{2 * kd + 2 * vd, d};
    if (has(r, "in_proj_qkv")) return Shape{2 * kd + vd, d};
    if (has(r, "in_proj_z")) return Shape{vd, d};
    if (has(r, "in_proj_ba")) return Shape{2 * vh, d};
    if (has(r, "in_proj_b") || has(r, "in_proj_a")) return Shape{vh, d};
    if (has(r, "conv1d")) return Shape{2 * kd + vd, 1, t.lin_conv};
    if (ends(r, "dt_bias") || ends(r, "A_log")) return Shape{vh};
    if (has(r, "norm.")) return Shape{t.lin_v_dim};
    if (has(r, "out_proj")) return Shape{d, vd};
    return std::nullopt;
  }
  if (has(r, "self_attn.") || has(r, "attention.")) {
    if (has(r, "q_a_proj")) return Shape{t.q_lora, d};
    if (has(r, "q_a_layernorm")) return Shape{t.q_lora};
    if (has(r, "q_b_proj")) return Shape{H * qk, t.q_lora};
    if (has(r, "kv_a_proj_with_mqa")) return Shape{t.kv_lora + t.qk_rope, d};
    if (has(r, "kv_a_layernorm")) return Shape{t.kv_lora};
    if (has(r, "kv_b_proj")) return Shape{H * (t.qk_nope + t.v_head), t.kv_lora};
    if (has(r, "q_proj")) return linear(r, H * qk * (t.attn_output_gate ? 2 : 1), d);
    if (has(r, "k_proj") || has(r, "v_proj")) return linear(r, KV * hd, d);
    if (has(r, "o_proj")) return ends(r, ".bias") ? Shape{d} : Shape{d, H * (mla ? t.v_head : hd)};
    if (has(r, "q_norm") || has(r, "k_norm")) return Shape{hd};
    if (ends(r, "sinks")) return Shape{H};
    return std::nullopt;
  }
  if (has(r, "experts.") && !has(r, "shared_expert")) {
    // MXFP4 fused experts (gpt-oss): [E, out, in / 32, 16] uint8 blocks, [E, out, in / 32] scales.
    for (const char* x : {"gate_up_proj_", "down_proj_"}) {
      if (!has(r, x)) continue;
      const bool gu = std::string(x) == "gate_up_proj_";
      const int64_t out = gu ? 2 * t.moe_ff : d, in = gu ? d : t.moe_ff;
      if (ends(r, "_blocks")) return Shape{t.n_expert, out, in / 32, 16};
      if (ends(r, "_scales")) return Shape{t.n_expert, out, in / 32};
      if (ends(r, "_bias")) return Shape{t.n_expert, out};
    }
    if (ends(r, "gate_up_proj")) return Shape{t.n_expert, 2 * t.moe_ff, d};  // fused, all experts
    if (ends(r, "experts.down_proj")) return Shape{t.n_expert, d, t.moe_ff};
    if (has(r, "down_proj") || has(r, ".w2.")) return Shape{d, t.moe_ff};
    if (has(r, "gate_proj") || has(r, "up_proj") || has(r, ".w1.") || has(r, ".w3.")) return Shape{t.moe_ff, d};
    return std::nullopt;
  }
  if (has(r, "shared_expert_gate")) return Shape{1, d};
  if (has(r, "shared_expert")) {
    const int64_t f = has(r, "shared_experts.") ? t.n_shared * t.moe_ff : t.shared_ff;
    return has(r, "down_proj") ? Shape{d, f} : Shape{f, d};
  }
  if (ends(r, "e_score_correction_bias") || ends(r, "mlp.router.bias")) return Shape{t.n_expert};
  if (ends(r, "mlp.gate.weight") || ends(r, "block_sparse_moe.gate.weight") || ends(r, "router.weight"))
    return Shape{t.n_expert, d};
  if (has(r, "mlp.")) {
    if (has(r, "down_proj")) return ends(r, ".bias") ? Shape{d} : Shape{d, t.ff};
    if (has(r, "gate_proj") || has(r, "up_proj")) return linear(r, t.ff, d);
    return std::nullopt;
  }
  if (ends(r, "eh_proj.weight")) return Shape{d, 2 * d};
  if (ends(r, "embed_tokens.weight") || ends(r, "shared_head.head.weight")) return Shape{t.vocab, d};
  // input/post-attention (and pre/post-feedforward) layernorm, enorm, hnorm, shared_head.norm
  if (ends(r, "norm.weight") || ends(r, "norm.bias")) return Shape{d};
  return std::nullopt;
}

std::optional<Shape> vision_shape(const Split& s, const std::string& n, const VisionDims& v, int64_t text_hidden) {
  const int64_t d = v.hidden, f = v.ff, r = s.rest.empty() ? 0 : 1;
  (void)r;
  const std::string& x = s.layer >= 0 ? s.rest : n;
  const bool bias = ends(x, ".bias");
  if (s.scope == "projector") {
    if (has(n, "mm_input_projection_weight")) return Shape{d, text_hidden};
    if (has(n, "mm_soft_emb_norm")) return Shape{d};
    if (has(n, "linear_1") && v.projector == "llama4") return Shape{text_hidden, v.proj_in};
    if (has(n, "linear_1")) return bias ? Shape{text_hidden} : Shape{text_hidden, d};
    if (has(n, "linear_2")) return bias ? Shape{text_hidden} : Shape{text_hidden, text_hidden};
    const int64_t m = d * v.merge * v.merge;
    if (has(n, "merger.norm") || has(n, "merger.ln_q")) return Shape{d};
    if (has(n, "linear_fc1")) return bias ? Shape{m} : Shape{m, m};
    if (has(n, "linear_fc2")) return bias ? Shape{v.out_hidden} : Shape{v.out_hidden, m};
    return std::nullopt;
  }
  if (s.layer >= 0) {
    if (has(x, "attn.qkv")) return bias ? Shape{3 * d} : Shape{3 * d, d};
    if (has(x, "q_proj") || has(x, "k_proj") || has(x, "v_proj") || has(x, "out_proj") || has(x, "attn.proj"))
      return bias ? Shape{d} : Shape{d, d};
    if (has(x, "fc1")) return bias ? Shape{f} : Shape{f, d};
    if (has(x, "fc2")) return bias ? Shape{d} : Shape{d, f};
    if (has(x, "norm")) return Shape{d};
    return std::nullopt;
  }
  if (has(n, "vision_adapter.mlp.fc1")) return Shape{v.adapter_in, f};
  if (has(n, "vision_adapter.mlp.fc2")) return Shape{v.adapter_out, v.adapter_out};
  if (ends(n, "class_embedding")) return Shape{d};
  if (has(n, "patch_embed")) {
    if (bias) return Shape{d};
    if (v.temporal > 1) return Shape{d, v.channels, v.temporal, v.patch, v.patch};
    return Shape{d, v.channels, v.patch, v.patch};
  }
  if (has(n, "position_embedding") || has(n, "pos_embed")) return Shape{v.n_pos, d};
  if (has(n, "layrnorm") || has(n, "layernorm") || has(n, "norm")) return Shape{d};
  return std::nullopt;
}

}  // namespace

bool is_pack_quantized(const std::string& weight_name, const ModelDims& d) {
  if (d.quant_bits <= 0 || !ends(weight_name, ".weight")) return false;
  const Classified c = classify(weight_name, d);
  if (c.layer < 0 || c.component == model::Component::kRouter || c.component == model::Component::kVision ||
      c.component == model::Component::kNorm || c.component == model::Component::kUnknown)
    return false;
  const std::string module = weight_name.substr(0, weight_name.size() - 7);
  // compressed-tensors matches "re:" entries with re.match (anchored at the start) and other
  // entries by module name; a checkpoint's prefix (language_model.) is allowed before a name.
  static thread_local std::map<std::string, std::regex> compiled;
  for (const auto& entry : d.quant_ignore) {
    if (entry.rfind("re:", 0) == 0) {
      auto it = compiled.find(entry);
      if (it == compiled.end()) {
        try {
          it = compiled.emplace(entry, std::regex(entry.substr(3))).first;
        } catch (const std::regex_error&) {
          continue;  // an expression std::regex cannot read ignores nothing
        }
      }
      if (std::regex_search(module, it->second, std::regex_constants::match_continuous)) return false;
    } else if (module == entry || ends(module, "." + entry)) {
      return false;
    }
  }
  return true;
}

bool is_mxfp4_experts(int64_t layer, const ModelDims& d) {
  if (!d.mxfp4 || !d.text.is_moe_layer(layer)) return false;
  const std::string module = "model.layers." + std::to_string(layer) + ".mlp.experts";
  static thread_local std::map<std::string, std::regex> compiled;
  for (const auto& key : d.quant_ignore) {
    if (ends(module, key)) return false;
    auto it = compiled.find(key);
    if (it == compiled.end()) {
      try {  // the key from the start, then a module boundary (or a key ending in '.')
        it = compiled.emplace(key, std::regex("(?:" + key + ")(?:\\..*)?" + (ends(key, ".") ? ".*" : ""))).first;
      } catch (const std::regex_error&) {
        continue;  // an expression std::regex cannot read excludes nothing
      }
    }
    if (std::regex_match(module, it->second)) return false;
  }
  return true;
}

int64_t tensor_params(const std::string& name, const Shape& shape, const ModelDims& d) {
  const int64_t n = shape_numel(shape);
  if (d.quant_bits > 0 && ends(name, ".weight_packed")) return n * (32 / d.quant_bits);
  if (d.mxfp4 && ends(name, "_blocks")) return n * 2;
  return n;
}

std::optional<Shape> shape_from_name(const std::string& name, const ModelDims& d) {
  if (d.quant_bits > 0) {  // compressed-tensors pack-quantized companions of X.weight [out, in]
    for (const char* suffix : {".weight_packed", ".weight_scale", ".weight_shape"}) {
      if (!ends(name, suffix)) continue;
      if (std::string(suffix) == ".weight_shape") return Shape{2};
      auto w = shape_from_name(name.substr(0, name.size() - std::string(suffix).size()) + ".weight", d);
      if (!w || w->size() != 2) return std::nullopt;
      if (std::string(suffix) == ".weight_packed") return Shape{(*w)[0], (*w)[1] * d.quant_bits / 32};
      return Shape{(*w)[0], ((*w)[1] + d.quant_group - 1) / d.quant_group};
    }
  }
  if (ends(name, "_scale_inv") && d.quant_block_rows > 0) {  // FP8 block scales of the weight before it
    auto w = shape_from_name(name.substr(0, name.size() - 10), d);
    if (!w || w->size() != 2) return std::nullopt;
    return Shape{((*w)[0] + d.quant_block_rows - 1) / d.quant_block_rows,
                 ((*w)[1] + d.quant_block_cols - 1) / d.quant_block_cols};
  }
  const Split s = split(name, d.text);
  if (s.scope == "vision" || s.scope == "projector")
    return d.vision ? vision_shape(s, name, *d.vision, d.text.hidden) : std::nullopt;
  return text_shape(s.layer >= 0 ? s.rest : name, d.text, s.layer >= 0, s.layer);
}

Classified classify(const std::string& name, const ModelDims& d) {
  using model::Component;
  Classified c;
  const Split s = split(name, d.text);
  c.layer = s.layer;
  c.mtp = s.scope == "mtp";
  const std::string& r = s.layer >= 0 ? s.rest : name;
  if (ends(name, "_scale_inv") || ends(name, ".weight_scale") || (d.mxfp4 && ends(name, "_scales")) || ends(name, ".input_scale") ||
      ends(name, ".weight_shape") || ends(name, ".weight_zero_point")) {
    c.component = Component::kQuantScale;
    c.part = "quantization scales";
    return c;
  }
  if (s.scope == "vision" || s.scope == "projector") {
    c.component = Component::kVision;
    c.part = s.scope == "projector" ? "projector" : "vision tower";
    return c;
  }
  auto set = [&](Component k, const char* part) {
    c.component = k;
    c.part = part;
    return c;
  };
  if (c.mtp && s.layer < 0 && !ends(name, "norm.weight")) return set(Component::kMtpHead, "MTP head");
  if (c.mtp && (ends(r, "eh_proj.weight") || ends(r, "embed_tokens.weight") || ends(r, "shared_head.head.weight")))
    return set(Component::kMtpHead, "MTP head");
  if (has(r, "attn_hc.") || has(r, "ffn_hc.") || has(r, "hc_head.")) return set(Component::kUnknown, "hyper-connections");  // counted under other, named
  if (s.layer < 0) {
    if (ends(r, "embed_tokens.weight")) return set(Component::kEmbedding, "embedding");
    if (ends(r, "lm_head.weight") || ends(r, "lm_head.bias")) return set(Component::kLmHead, "lm_head");
    if (ends(r, "norm.weight") || ends(r, "norm.bias")) return set(Component::kNorm, "norms");
    return set(Component::kUnknown, "unknown");
  }
  if (has(r, "indexer.")) return set(Component::kAttention, "sparse-attention indexer");
  if (has(r, "compressor.")) return set(Component::kAttention, "KV compressor");
  if (d.text.kda_heads > 0 && d.text.is_linear_layer(s.layer) && has(r, "self_attn."))
    return set(has(r, "o_norm") ? Component::kNorm : Component::kAttention, has(r, "o_norm") ? "norms" : "linear attention");
  if (has(r, "linear_attn.")) return set(ends(r, "norm.weight") ? Component::kNorm : Component::kAttention,
                                          ends(r, "norm.weight") ? "norms" : "linear attention");
  if (has(r, "self_attn.") || has(r, "attention.")) {
    if (has(r, "layernorm") || has(r, "q_norm") || has(r, "k_norm") || has(r, "_norm.")) return set(Component::kNorm, "norms");
    if (d.text.o_groups > 0 && has(r, "_proj")) return set(Component::kAttention, "attention projections");
    if (has(r, "q_a_proj") || has(r, "q_b_proj") || has(r, "kv_a_proj") || has(r, "kv_b_proj"))
      return set(Component::kAttention, "MLA projections");
    if (ends(r, "sinks")) return set(Component::kAttention, "attention sinks");
    if (has(r, "_proj")) return set(Component::kAttention, "attention projections");
    return set(Component::kUnknown, "unknown");
  }
  if (has(r, "experts.") && !has(r, "shared_expert")) return set(Component::kRoutedExpert, "routed experts");
  if (has(r, "shared_expert")) return set(Component::kSharedExpert, "shared experts");
  if (ends(r, "e_score_correction_bias") || ends(r, "mlp.gate.weight") || ends(r, "router.bias") || ends(r, "block_sparse_moe.gate.weight") ||
      ends(r, "router.weight"))
    return set(Component::kRouter, "router");
  if (has(r, "mlp.") && has(r, "_proj")) return set(Component::kMlp, "dense MLP");
  if (ends(r, "norm.weight") || ends(r, "norm.bias")) return set(Component::kNorm, "norms");
  return set(Component::kUnknown, "unknown");
}

std::string name_template(const std::string& name) {
  std::string out;
  size_t i = 0;
  const char* prev = nullptr;  // the segment before a number decides {L} or {E}
  std::string seg;
  while (i < name.size()) {
    size_t e = name.find('.', i);
    if (e == std::string::npos) e = name.size();
    const std::string part = name.substr(i, e - i);
    bool digits = !part.empty();
    for (char ch : part) digits = digits && std::isdigit(static_cast<unsigned char>(ch));
    if (!out.empty()) out += '.';
    if (digits) out += seg == "experts" ? "{E}" : "{L}";
    else out += part;
    seg = part;
    i = e + 1;
  }
  (void)prev;
  return out;
}

std::vector<TensorInfo> synthesize_tensors(const ModelDims& d) {
  const TextDims& t = d.text;
  std::vector<std::string> names;
  const std::string p = "model.";
  auto norm = [&](const std::string& name) {
    names.push_back(name + ".weight");
    if (t.norm_bias) names.push_back(name + ".bias");
  };
  auto layer = [&](const std::string& base, int64_t l, bool mtp_layer) {
    norm(base + "input_layernorm");
    if (!t.single_norm) norm(base + "post_attention_layernorm");
    if (t.sandwich_norms) {
      norm(base + "pre_feedforward_layernorm");
      norm(base + "post_feedforward_layernorm");
    }
    if (t.hc_mult > 0)
      for (const char* hc : {"attn_hc.", "ffn_hc."})
        for (const char* n : {"fn", "base", "scale"}) names.push_back(base + hc + n);
    if (t.o_groups > 0) {  // DeepSeek-V4
      for (const char* n : {"q_a_proj.weight", "q_a_norm.weight", "q_b_proj.weight", "kv_proj.weight", "kv_norm.weight",
                            "o_a_proj.weight", "o_b_proj.weight", "sinks"})
        names.push_back(base + "self_attn." + n);
      const std::string kind = mtp_layer ? "" : t.compressed_kind(l);
      if (!kind.empty())
        for (const char* n : {"kv_proj.weight", "gate_proj.weight", "position_bias", "kv_norm.weight"})
          names.push_back(base + "self_attn.compressor." + n);
      if (kind == "csa")
        for (const char* n : {"kv_proj.weight", "gate_proj.weight", "position_bias", "kv_norm.weight", "q_b_proj.weight",
                              "scorer.weights_proj.weight"})
          names.push_back(base + "self_attn.compressor.indexer." + n);
    } else if (t.is_linear_layer(l) && !mtp_layer && t.kda_heads > 0) {
      for (const char* n : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "conv1d.weight", "forget_gate.f_a_proj.weight",
                            "forget_gate.f_b_proj.weight", "forget_gate.dt_bias", "forget_gate.A_log", "b_proj.weight",
                            "g_a_proj.weight", "g_b_proj.weight", "o_norm.weight", "o_proj.weight"})
        names.push_back(base + "self_attn." + n);
    } else if (t.is_linear_layer(l) && !mtp_layer) {
      for (const char* n : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"})
        names.push_back(base + "linear_attn." + n + ".weight");
      for (const char* n : {"conv1d.weight", "dt_bias", "A_log", "norm.weight"}) names.push_back(base + "linear_attn." + n);
    } else if (t.kv_lora > 0) {
      if (t.q_lora > 0) {
        names.push_back(base + "self_attn.q_a_proj.weight");
        names.push_back(base + "self_attn.q_a_layernorm.weight");
        names.push_back(base + "self_attn.q_b_proj.weight");
      } else {
        names.push_back(base + "self_attn.q_proj.weight");
      }
      names.push_back(base + "self_attn.kv_a_proj_with_mqa.weight");
      names.push_back(base + "self_attn.kv_a_layernorm.weight");
      names.push_back(base + "self_attn.kv_b_proj.weight");
      names.push_back(base + "self_attn.o_proj.weight");
      if (t.has_indexer(l)) {
        for (const char* n : {"wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias", "weights_proj.weight"})
          names.push_back(base + "self_attn.indexer." + n);
      }
    } else {
      for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        names.push_back(base + "self_attn." + n + ".weight");
        const bool o = std::string(n) == "o_proj";
        if (o ? t.attn_o_bias : t.attn_qkv_bias) names.push_back(base + "self_attn." + n + ".bias");
      }
      if (t.qk_norm) {
        names.push_back(base + "self_attn.q_norm.weight");
        names.push_back(base + "self_attn.k_norm.weight");
      }
      if (t.attn_sinks) names.push_back(base + "self_attn.sinks");
    }
    if (t.router_bias && t.is_moe_layer(l) && !mtp_layer) {  // gpt-oss: router and fused experts with biases
      names.push_back(base + "mlp.router.weight");
      names.push_back(base + "mlp.router.bias");
      for (const char* x : {"gate_up_proj", "down_proj"}) {
        const std::string e = base + "mlp.experts." + x;
        if (is_mxfp4_experts(l, d)) names.push_back(e + "_blocks"), names.push_back(e + "_scales");
        else names.push_back(e);
        names.push_back(e + "_bias");
      }
    } else if (t.is_moe_layer(l) || (mtp_layer && t.n_expert > 0)) {
      names.push_back(base + "mlp.gate.weight");
      if (t.scoring == "sigmoid") names.push_back(base + "mlp.gate.e_score_correction_bias");
      for (int64_t e = 0; e < t.n_expert; ++e)
        for (const char* n : {"gate_proj", "up_proj", "down_proj"})
          names.push_back(base + "mlp.experts." + std::to_string(e) + "." + n + ".weight");
      if (t.n_shared > 0)
        for (const char* n : {"gate_proj", "up_proj", "down_proj"}) names.push_back(base + "mlp.shared_experts." + n + ".weight");
      if (t.shared_ff > 0) {
        for (const char* n : {"gate_proj", "up_proj", "down_proj"}) names.push_back(base + "mlp.shared_expert." + n + ".weight");
        names.push_back(base + "mlp.shared_expert_gate.weight");
      }
    } else {
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
        if (!t.gated_mlp && std::string(n) == "gate_proj") continue;
        names.push_back(base + "mlp." + n + ".weight");
        if (t.mlp_bias) names.push_back(base + "mlp." + n + ".bias");
      }
    }
  };
  names.push_back(p + "embed_tokens.weight");
  if (t.embed_norm) norm(p + "embed_layernorm");
  for (int64_t l = 0; l < t.n_layer; ++l) layer(p + "layers." + std::to_string(l) + ".", l, false);
  if (t.hc_mult > 0)
    for (const char* n : {"hc_fn", "hc_base", "hc_scale"}) names.push_back(p + "hc_head." + n);
  norm(p + "norm");
  if (!t.tie_embeddings) names.push_back("lm_head.weight");
  if (t.lm_head_bias) names.push_back("lm_head.bias");
  for (int64_t i = 0; i < t.n_mtp; ++i) {
    if (t.mtp_qwen_style) {
      layer("mtp.layers." + std::to_string(i) + ".", t.n_layer + i, true);
    } else {
      const std::string base = p + "layers." + std::to_string(t.n_layer + i) + ".";
      layer(base, t.n_layer + i, true);
      for (const char* n : {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"})
        names.push_back(base + n);
      if (t.mtp_own_embedding)
        for (const char* n : {"embed_tokens.weight", "shared_head.head.weight"}) names.push_back(base + n);
    }
  }
  if (t.n_mtp > 0 && t.mtp_qwen_style)
    for (const char* n : {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                          "mtp.norm.weight"})
      names.push_back(n);
  if (d.vision) {
    const VisionDims& v = *d.vision;
    if (v.style == "clip") {
      const std::string b = "vision_tower.vision_model.";
      for (const char* n : {"embeddings.patch_embedding.weight", "embeddings.position_embedding.weight",
                            "post_layernorm.weight", "post_layernorm.bias"})
        names.push_back(b + n);
      if (v.class_token) names.push_back(b + "embeddings.class_embedding");
      if (v.patch_bias) names.push_back(b + "embeddings.patch_embedding.bias");
      if (v.pre_norm) names.push_back(b + "pre_layrnorm.weight"), names.push_back(b + "pre_layrnorm.bias");
      for (int64_t l = 0; l < v.n_layer; ++l)
        for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                              "layer_norm1", "layer_norm2", "mlp.fc1", "mlp.fc2"})
          for (const char* wb : {".weight", ".bias"})
            names.push_back(b + "encoder.layers." + std::to_string(l) + "." + n + wb);
      if (v.projector == "gemma3") {
        names.push_back("multi_modal_projector.mm_input_projection_weight");
        names.push_back("multi_modal_projector.mm_soft_emb_norm.weight");
      } else if (v.projector == "llama4") {
        names.push_back(b + "vision_adapter.mlp.fc1.weight");
        names.push_back(b + "vision_adapter.mlp.fc2.weight");
        names.push_back("multi_modal_projector.linear_1.weight");
      } else {
        for (const char* n : {"linear_1", "linear_2"})
          for (const char* wb : {".weight", ".bias"}) names.push_back(std::string("multi_modal_projector.") + n + wb);
      }
    } else {
      const std::string b = "model.visual.";
      names.push_back(b + "patch_embed.proj.weight");
      if (v.patch_bias) names.push_back(b + "patch_embed.proj.bias");
      if (v.n_pos > 0) names.push_back(b + "pos_embed.weight");
      for (int64_t l = 0; l < v.n_layer; ++l)
        for (const char* n : {"attn.qkv", "attn.proj", "norm1", "norm2", "mlp.linear_fc1", "mlp.linear_fc2"})
          for (const char* wb : {".weight", ".bias"}) names.push_back(b + "blocks." + std::to_string(l) + "." + n + wb);
      for (const char* n : {"merger.norm", "merger.linear_fc1", "merger.linear_fc2"})
        for (const char* wb : {".weight", ".bias"}) names.push_back(b + n + wb);
    }
  }
  std::vector<TensorInfo> out;
  out.reserve(names.size());
  for (auto& n : names) {
    auto shape = shape_from_name(n, d);
    if (shape && shape->size() == 2 && is_pack_quantized(n, d)) {
      const std::string base = n.substr(0, n.size() - 7);
      for (const char* suffix : {".weight_packed", ".weight_scale", ".weight_shape"})
        out.push_back({base + suffix, shape_from_name(base + suffix, d).value_or(Shape{}), "", 0});
      continue;
    }
    out.push_back({std::move(n), shape.value_or(Shape{}), "", 0});
  }
  return out;
}

}  // namespace dayzero::analysis
