// The plan request from the generic analysis (generic_request.h): shard rules by tensor part,
// per-layer caches by attention kind, caveats.
#include "plan/generic_request.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>

#include "core/dtype.h"

namespace dayzero::plan {
namespace {

using analysis::Classified;
using analysis::TextDims;
using model::Component;
using model::ShardRule;

bool ends(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The expert index after "experts." (-1 when the tensor holds every expert, or none).
int expert_index(const std::string& name) {
  const size_t p = name.find("experts.");
  if (p == std::string::npos) return -1;
  size_t q = p + 8, e = q;
  while (e < name.size() && std::isdigit(static_cast<unsigned char>(name[e]))) ++e;
  if (e == q || e >= name.size() || name[e] != '.') return -1;
  return std::stoi(name.substr(q, e - q));
}

int64_t linear_blocks(const TextDims& t) {
  if (t.lin_k_heads <= 0 || t.lin_v_heads <= 0) return 0;
  return std::gcd(t.lin_k_heads, t.lin_v_heads);
}

// Split along dim in `blocks` equal blocks, replicated when the extent does not divide.
void split_blocks(model::TensorSpec& s, int dim, int64_t blocks) {
  if (blocks <= 0 || static_cast<int>(s.shape.size()) <= dim || s.shape[dim] % blocks != 0) return;
  s.rule = dim == 0 ? ShardRule::kSplitDim0 : ShardRule::kSplitDim1;
  s.shard_block = s.shape[dim] / blocks;
}

void set_rule(model::TensorSpec& s, const Classified& c, const analysis::ModelDims& d) {
  const TextDims& t = d.text;
  const std::string& n = s.name;
  const bool bias = ends(n, ".bias");
  const bool mla = t.kv_lora > 0;
  const int64_t hd = mla ? t.qk_nope + t.qk_rope : t.head_dim;
  auto split = [&](int dim, int64_t block) {
    s.rule = dim == 0 ? ShardRule::kSplitDim0 : ShardRule::kSplitDim1;
    s.shard_block = std::max<int64_t>(1, block);
  };
  switch (c.component) {
    case Component::kEmbedding:
    case Component::kLmHead:
      s.rule = ShardRule::kVocabSplit;
      return;
    case Component::kRoutedExpert:
      s.rule = ShardRule::kExpertOwned;
      s.expert = expert_index(n);
      if (s.expert >= 0) {
        s.n_expert = static_cast<int>(t.n_expert);
        s.expert_split_dim = has(n, "down_proj") || has(n, ".w2.") ? 1 : 0;
      }
      return;
    case Component::kSharedExpert:
    case Component::kMlp:
      if (s.shape.size() == 2) split(has(n, "down_proj") ? 1 : 0, 1);
      else if (bias && !has(n, "down_proj")) split(0, 1);
      return;
    case Component::kAttention:
      if (c.part == "linear attention") {
        split_blocks(s, has(n, "out_proj") ? 1 : 0, linear_blocks(t));
      } else if (c.part == "MLA projections") {
        if (has(n, "q_b_proj")) split(0, hd);
        else if (has(n, "kv_b_proj")) split(0, t.qk_nope + t.v_head);
      } else if (c.part == "attention projections") {
        if (has(n, "q_proj")) split(0, hd * (t.attn_output_gate ? 2 : 1));
        else if (has(n, "k_proj") || has(n, "v_proj")) split(0, t.head_dim);
        else if (has(n, "o_proj") && !bias) split(1, mla ? t.v_head : t.head_dim);
      } else if (c.part == "attention sinks") {
        split(0, 1);
      }
      return;  // the sparse-attention indexer stays whole on every rank
    default:
      return;  // norms, router, vision, projector, unknown: replicated
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

int64_t n_linear_layers(const TextDims& t) {
  int64_t n = 0;
  for (int64_t l = 0; l < t.n_layer; ++l) n += t.is_linear_layer(l);
  return n;
}

}  // namespace

std::vector<model::TensorSpec> generic_specs(const analysis::Analysis& a, bool as_stored) {
  const analysis::ModelDims& d = a.dims;
  std::vector<model::TensorSpec> specs;
  specs.reserve(a.tensors.size());
  std::map<std::string, size_t> by_name;
  for (const auto& x : a.tensors) {
    const Classified c = analysis::classify(x.name, d);
    model::TensorSpec s;
    s.name = x.name;
    s.shape = x.shape;
    s.component = c.component;
    if (c.component == Component::kVision) s.layer = -1;  // the vision tower runs before layer 0
    else if (c.mtp) s.layer = static_cast<int>(d.text.n_layer + std::max<int64_t>(0, c.layer));
    else s.layer = static_cast<int>(c.layer);
    if (c.mtp || c.component == Component::kQuantScale) s.skip_load = true;
    if (!s.skip_load) set_rule(s, c, d);
    by_name[s.name] = specs.size();
    specs.push_back(std::move(s));
  }
  // FP8 block scales count with their weight (held_bytes), as the adapters declare them.
  if (d.quant_method == "fp8" && d.quant_block_rows > 0)
    for (auto& s : specs) {
      if (!ends(s.name, "_scale_inv")) continue;
      auto w = by_name.find(s.name.substr(0, s.name.size() - 10));
      if (w == by_name.end()) continue;
      model::TensorSpec& weight = specs[w->second];
      weight.stored = {&stored_format(StoredScheme::kFp8Block), d.quant_block_rows, d.quant_block_cols,
                       model::StoredPlacement::kOwnName, s.name};
    }
  if (d.quant_bits > 0) {
    // Pack-quantized Linears: as stored, the int32 words and the group scales split as the
    // weight does (a column split in packed / grouped columns) and weight_shape goes with the
    // weight's expert; converted, the weight at its logical shape and the companions dropped.
    const int64_t per_word = 32 / d.quant_bits;
    for (auto& s : specs) {
      if (!ends(s.name, ".weight_packed") || s.shape.size() != 2) continue;
      const std::string base = s.name.substr(0, s.name.size() - 14);
      if (!as_stored) {
        s.shape[1] *= per_word;
        continue;
      }
      if (s.rule == ShardRule::kSplitDim1)
        s.shard_block = s.shard_block % per_word == 0 ? s.shard_block / per_word : 1;
      for (const char* suffix : {".weight_scale", ".weight_shape"}) {
        auto it = by_name.find(base + suffix);
        if (it == by_name.end()) continue;
        model::TensorSpec& c = specs[it->second];
        if (std::string(suffix) == ".weight_scale" && c.shape.size() == 2) {
          c.rule = s.rule;
          c.expert = s.expert;
          c.n_expert = s.n_expert;
          c.expert_split_dim = s.expert_split_dim;
          c.shard_block = s.rule == ShardRule::kSplitDim1
                              ? (s.shard_block * per_word % d.quant_group == 0 ? s.shard_block * per_word / d.quant_group : 1)
                              : s.shard_block;
        } else if (s.rule == ShardRule::kExpertOwned) {
          c.rule = ShardRule::kExpertOwned;
          c.expert = s.expert;
          c.n_expert = s.n_expert;
          c.expert_split_dim = -1;
        }
        c.skip_load = false;
      }
    }
  }
  if (d.mxfp4) {
    // MXFP4 fused experts [E, ...] (blocks, their e8m0 scales as stored, biases): the experts
    // split along dim 0 over the tp group (E / tp whole experts a rank: ep = tp, etp = 1 in
    // bytes); converted, the blocks at their logical [E, out, in] and the scales dropped.
    for (auto& s : specs) {
      const bool fused = s.layer >= 0 && has(s.name, "mlp.experts.") && expert_index(s.name) < 0 &&
                         !s.shape.empty() && s.shape[0] == d.text.n_expert;
      if (fused && ends(s.name, "_scales") && s.component == Component::kQuantScale && as_stored &&
          by_name.count(s.name.substr(0, s.name.size() - 7) + "_blocks"))
        s.skip_load = false;
      if (fused && !s.skip_load) {
        s.rule = ShardRule::kSplitDim0;
        s.shard_block = 1;
      }
      if (!as_stored && ends(s.name, "_blocks") && s.shape.size() == 4)
        s.shape = Shape{s.shape[0], s.shape[1], s.shape[2] * s.shape[3] * 2};
    }
  }
  return specs;
}

model::HParams generic_hparams(const analysis::Analysis& a) {
  const TextDims& t = a.dims.text;
  model::HParams hp;
  hp.family = "generic";
  hp.model_type = a.dims.model_type.empty() ? t.model_type : a.dims.model_type;
  hp.n_vocab = t.vocab;
  hp.n_embd = t.hidden;
  hp.n_layer = t.n_layer;
  hp.n_head = t.n_head;
  const bool mla = t.kv_lora > 0;
  hp.n_head_kv = mla ? t.n_head : t.n_head_kv;
  hp.head_dim = mla ? std::max(t.qk_nope + t.qk_rope, t.v_head) : t.head_dim;
  hp.n_ff = a.main.dense_mlp > 0 || t.n_expert == 0 ? t.ff : t.moe_ff;
  hp.max_position = t.max_position;
  hp.tie_embeddings = t.tie_embeddings;
  hp.n_expert = t.n_expert;
  hp.n_expert_used = t.top_k;
  hp.n_ff_expert = t.moe_ff;
  hp.n_nextn_layer = t.n_mtp;
  hp.quant_block_rows = a.dims.quant_block_rows;
  hp.quant_block_cols = a.dims.quant_block_cols;
  return hp;
}

std::vector<Caveat> generic_caveats(const analysis::Analysis& a, WeightsOnDevice weights) {
  const TextDims& t = a.dims.text;
  std::vector<Caveat> out;
  auto add = [&](const char* figure, std::string text) { out.push_back({figure, std::move(text)}); };
  if (a.source == analysis::Source::kConfig)
    add("weights", "estimate from config.json alone: shapes from the family-independent rules (no weight index or "
                   "safetensors headers)");
  if (a.source == analysis::Source::kIndexNames)
    add("weights", "tensor names from the weight index, shapes derived from config.json (no safetensors headers)");
  if (a.unknown_tensors > 0)
    add("weights", std::to_string(a.unknown_tensors) + " tensor(s) no rule explains (" + std::to_string(a.unknown_bytes) +
                       " bytes), held whole on every rank of their stage");
  if (weights == WeightsOnDevice::kAsStored && !a.dims.quant_method.empty() && a.dims.quant_method != "fp8" &&
      a.dims.quant_bits == 0 && !a.dims.mxfp4)
    add("weights", "quantization " + a.dims.quant_method + " (" + a.dims.quant_detail +
                       ") is not modelled in bytes: its weights count at the dtype the analysis gives them");
  if (weights == WeightsOnDevice::kAsStored && a.dims.mxfp4)
    add("weights", "mxfp4 (" + a.dims.quant_detail + "): the experts as stored, uint8 blocks of two e2m1 values "
                   "plus one uint8 e8m0 scale per 32 weights; dayzero has no kernel for them yet");
  if (weights == WeightsOnDevice::kAsStored && a.dims.quant_bits > 0)
    add("weights", a.dims.quant_method + " (" + a.dims.quant_detail + "): the quantized Linears as stored, " +
                       std::to_string(a.dims.quant_bits) + "-bit integers packed in int32 plus bf16 scales per " +
                       std::to_string(a.dims.quant_group) + " weights; dayzero has no kernel for them yet");
  std::vector<std::string> unsupported;
  for (const auto& f : a.features)
    if (f.status == analysis::FeatureStatus::kNewBlock || f.status == analysis::FeatureStatus::kUnknown)
      unsupported.push_back(f.name);
  if (!unsupported.empty())
    add("weights", "features dayzero has no block for (counted from their shapes, the model cannot run yet): " +
                       join(unsupported));
  int64_t n_linear = n_linear_layers(t), n_sliding = 0;
  for (int64_t l = 0; l < t.n_layer; ++l) n_sliding += !t.is_linear_layer(l) && t.is_sliding_layer(l);
  if (t.kv_lora > 0) {
    const int64_t own = 2 * t.n_head * std::max(t.qk_nope + t.qk_rope, t.v_head);
    const int64_t latent = t.kv_lora + t.qk_rope;
    add("kv_cache", "MLA: the latent kv_lora_rank " + std::to_string(t.kv_lora) + " + qk_rope_head_dim " +
                        std::to_string(t.qk_rope) + " = " + std::to_string(latent) +
                        " elements per token and layer, whole on every tp rank; dayzero's own MLA block caches the "
                        "expanded k and v instead: 2 x " + std::to_string(t.n_head) + " heads x " +
                        std::to_string(std::max(t.qk_nope + t.qk_rope, t.v_head)) + " = " + std::to_string(own) +
                        " per token and layer (split over tp)");
    if (t.index_topk > 0)
      add("kv_cache", "+ the sparse-attention indexer's key, index_head_dim " + std::to_string(t.index_head_dim) +
                          " per token and layer (DSA: needs a new block), at the compute dtype");
  }
  if (n_sliding > 0)
    add("kv_cache", "sliding window " + std::to_string(t.sliding_window) + " bounds the cache of " +
                        std::to_string(n_sliding) + " of " + std::to_string(t.n_layer) +
                        " layers (sliding window: needs a new block)");
  if (n_linear > 0) {
    add("kv_cache", "no KV cache in the " + std::to_string(n_linear) + " linear-attention layers; " +
                        "the other " + std::to_string(t.n_layer - n_linear) + " layers hold one");
    const int64_t kd = t.lin_k_heads * t.lin_k_dim, vd = t.lin_v_heads * t.lin_v_dim;
    add("state", "linear attention (Gated DeltaNet): per sequence and layer the conv window (" +
                     std::to_string(t.lin_conv) + " - 1) x " + std::to_string(2 * kd + vd) +
                     " channels at the compute dtype and " + std::to_string(t.lin_v_heads) + " x " +
                     std::to_string(t.lin_k_dim) + " x " + std::to_string(t.lin_v_dim) + " f32 recurrent state");
  }
  if (t.kv_lora > 0 || n_linear > 0 || t.index_topk > 0)
    add("activations", "the generic widths of the memory model (no MLA, indexer or linear-attention intermediates)");
  return out;
}

Result<PlanRequest> make_generic_plan_request(const analysis::Analysis& a, const RequestInputs& in,
                                              WeightSizes* sizes) {
  if (a.dims.text.n_layer < 1) return Status::InvalidArgument("the model has no decoder layers");
  PlanRequest req;
  req.hp = generic_hparams(a);
  req.specs = generic_specs(a, in.weights == WeightsOnDevice::kAsStored);
  // Edge names as the analysed tensors spell them (nested checkpoints prefix them).
  bool have_embed = false, have_head = false;
  for (size_t i = 0; i < req.specs.size(); ++i) {
    const model::TensorSpec& s = req.specs[i];
    if (s.skip_load || s.layer >= 0) continue;
    if (s.component == Component::kEmbedding && !have_embed) req.names.embed = s.name, have_embed = true;
    if (s.component == Component::kLmHead && !have_head) req.names.lm_head = s.name, have_head = true;
    if (s.component == Component::kNorm && ends(s.name, "norm.weight")) req.names.final_norm = s.name;
  }
  if (!have_head) req.names.lm_head = req.names.embed;  // tied
  WeightSizes w;
  if (in.weights == WeightsOnDevice::kAsStored) {
    std::map<int64_t, uint64_t> bytes_by_size;
    w.stored_bytes.reserve(a.tensors.size());
    for (const auto& x : a.tensors) {
      const auto dt = parse_dtype(x.dtype);
      const int64_t size = dt ? static_cast<int64_t>(dtype_size(*dt)) : 0;
      w.stored_bytes.push_back(size);
      if (size > 0) bytes_by_size[size] += x.bytes;
    }
    w.bytes_per_weight = 2;
    uint64_t most = 0;
    for (const auto& [size, b] : bytes_by_size)
      if (b > most) most = b, w.bytes_per_weight = size;
    for (auto& s : w.stored_bytes)
      if (s == 0) s = w.bytes_per_weight;
    w.label = std::string(a.source == analysis::Source::kHeaders ? "as stored per the safetensors headers"
                                                                   : "as stored per the generic analysis") +
              "; each tensor at its stored size";
  } else {
    w.bytes_per_weight = in.weights == WeightsOnDevice::kBF16 ? 2 : 4;
    w.label = in.weights == WeightsOnDevice::kBF16 ? "bfloat16" : "float32";
  }
  req.layer_descs = analysis::describe_layers(a.dims.text);
  model::count_layer_weights(req.specs, req.layer_descs);
  req.caveats = generic_caveats(a, in.weights);
  fill_request_inputs(in, w, req);
  if (sizes) *sizes = std::move(w);
  return req;
}

CacheSummary summarize_cache(const std::vector<model::LayerDesc>& layers, int64_t a) {
  CacheSummary s;
  for (const auto& d : layers) {
    const LayerCache& c = d.cache;
    const int64_t kv = (c.kv_heads * c.kv_per_head() + c.whole_per_token()) * a;
    if (kv > 0 && c.window > 0) s.window_kv_bytes_per_token += kv, ++s.window_layers;
    else if (kv > 0) s.kv_bytes_per_token += kv, ++s.kv_layers;
    if (c.compress_rate > 0) {
      s.compressed_kv_bytes_per_token += static_cast<double>(c.compressed_per_entry() * a) / c.compress_rate;
      ++s.compressed_layers;
    }
    s.pending_bytes_per_sequence += c.pending_elements * a;
    const int64_t st = c.state_heads * (c.conv_elements_per_head() * a + c.recurrent_per_head() * kStateBytes);
    if (st > 0) s.state_bytes_per_sequence += st, ++s.state_layers;
  }
  return s;
}

}  // namespace dayzero::plan
