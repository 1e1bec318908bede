// The memory model (memory.h): exact weight slices, KV cache, activations, headroom per rank.
#include "plan/memory.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "core/check.h"
#include "topology/topology.h"

namespace dayzero::plan {

int64_t local_kv_heads(const model::HParams& hp, int tp) {
  if (hp.n_head_kv % tp == 0) return hp.n_head_kv / tp;
  DZ_CHECK(tp % hp.n_head_kv == 0, hp.n_head_kv << " kv heads over tp=" << tp);
  return 1;
}

int64_t local_heads(int64_t heads, int tp) {
  if (heads <= 0) return 0;
  if (heads % tp == 0) return heads / tp;
  DZ_CHECK(tp % heads == 0, heads << " heads over tp=" << tp);
  return 1;
}

std::vector<LayerCache> layer_caches(const std::vector<model::LayerDesc>& layers) {
  std::vector<LayerCache> out;
  out.reserve(layers.size());
  for (const auto& d : layers) out.push_back(d.cache);
  return out;
}

int64_t layer_kv_bytes(const LayerCache& c, int tp, const MemoryParams& p) {
  const int64_t tokens = c.window > 0 ? std::min(c.window, p.max_context_tokens) : p.max_context_tokens;
  return p.batch * p.bytes_per_activation *
         (tokens * (local_heads(c.kv_heads, tp) * c.kv_per_head() + c.whole_per_token()) +
          c.compressed_entries(p.max_context_tokens) * c.compressed_per_entry());
}

int64_t layer_state_bytes(const LayerCache& c, int tp, const MemoryParams& p) {
  return p.batch * (local_heads(c.state_heads, tp) *
                        (c.conv_elements_per_head() * p.bytes_per_activation + c.recurrent_per_head() * kStateBytes) +
                    c.pending_elements * p.bytes_per_activation);
}

StageCache stage_cache(int begin, int end, int tp, const MemoryParams& p) {
  DZ_CHECK(begin >= 0 && end <= static_cast<int>(p.cache.size()),
           "layers [" << begin << ", " << end << ") of " << p.cache.size() << " cache entries");
  StageCache s;
  for (int l = begin; l < end; ++l) {
    s.kv += layer_kv_bytes(p.cache[l], tp, p);
    s.state += layer_state_bytes(p.cache[l], tp, p);
  }
  return s;
}

int64_t activation_bytes(const model::HParams& hp, int tp, bool last_stage, const MemoryParams& p) {
  const int64_t T = p.max_context_tokens * p.batch;
  const int64_t width = 4 * hp.n_embd + 2 * (hp.n_head / tp) * hp.head_dim + 2 * local_kv_heads(hp, tp) * hp.head_dim +
                        2 * (hp.n_ff / tp);
  int64_t bytes = p.bytes_per_activation * T * width;
  if (last_stage) bytes += 4 * T * ((hp.n_vocab + tp - 1) / tp);
  return bytes;
}

DType kept_dtype(const model::TensorSpec& spec, DType stored, WeightsOnDevice weights, KeepsQuantized keeps) {
  // An integer table (DeepSeek-V4's tid2eid) is kept in f32, exact below 2^24 (bf16 is exact
  // only to 256: 384 experts would be rounded).
  if (spec.index_range > 0) return DType::kF32;
  if (weights == WeightsOnDevice::kBF16) return DType::kBF16;
  if (weights == WeightsOnDevice::kF32) return DType::kF32;
  if (model::is_stored_weight(spec)) {
    // As stored where the backend keeps the scheme (INT4 only with the BF16 scales its kernels read).
    const StoredScheme scheme = spec.stored.format->scheme;
    if (!keeps.keeps(scheme) || (scheme == StoredScheme::kInt4Group && stored != DType::kBF16)) return DType::kF32;
    switch (scheme) {
      case StoredScheme::kFp8Block: return stored;
      case StoredScheme::kInt4Group: return DType::kI4;
      case StoredScheme::kMxfp4:
      case StoredScheme::kNvfp4: return DType::kF4;
    }
  }
  const bool fp8 = stored == DType::kF8_E4M3 || stored == DType::kF8_E5M2;
  if (fp8 && !keeps.fp8_unscaled) return DType::kF32;
  if (stored == DType::kF32) return DType::kF32;
  return DType::kBF16;
}

int64_t held_bytes(const model::TensorSpec& spec, size_t index, const Slice& slice, const MemoryParams& p) {
  if (spec.skip_load || !slice.held) return 0;
  if (p.stored_bytes.empty()) return slice_bytes(spec, slice, p.bytes_per_weight);
  DZ_CHECK(index < p.stored_bytes.size(), spec.name << ": no stored element size (" << p.stored_bytes.size()
                                                    << " for spec " << index << ")");
  const int64_t elem = spec.index_range > 0 ? 4 : p.stored_bytes[index];  // kept_dtype: an index table in f32
  // A quantized weight as stored: its values, the scales of the blocks covering the slice and any
  // global scale (the stored-format table's byte rule), unless dequantised on load (weight_sizes: 4 B).
  if (model::is_stored_weight(spec) && spec.shape.size() == 2 && elem != 4) return stored_slice(spec, slice).held_bytes();
  return slice_bytes(spec, slice, elem);
}

std::vector<int64_t> stored_bytes_from_config(const std::vector<model::TensorSpec>& specs, int64_t other) {
  std::unordered_set<std::string> scales;
  for (const auto& s : specs)
    if (model::is_stored_weight(s, StoredScheme::kFp8Block)) scales.insert(s.stored.scale);
  std::vector<int64_t> out(specs.size(), other);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (model::is_stored_weight(specs[i])) out[i] = 1;  // counted by the stored-format table
    else if (scales.count(specs[i].name)) out[i] = kScaleBytes;
  }
  return out;
}

RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp, const Plan& plan,
                       int rank, const MemoryParams& p, const EdgeNames& names) {
  RankMemory m;
  for (size_t i = 0; i < specs.size(); ++i)
    if (!specs[i].skip_load) m.weights += held_bytes(specs[i], i, slice_for(specs[i], hp, plan, rank, names), p);
  const Stage& st = plan.stage_of(rank);
  const StageCache c = stage_cache(st.layer_begin, st.layer_end, plan.tp, p);
  m.kv_cache = c.kv;
  m.state = c.state;
  m.activations = activation_bytes(hp, plan.tp, st.has_lm_head, p);
  m.headroom = p.headroom_bytes;
  return m;
}

std::vector<RankMemory> estimate_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                                        const Plan& plan, const MemoryParams& p, const EdgeNames& names) {
  std::vector<RankMemory> out(plan.world_size);
  // A wide expert group spans ep_dp replicas that hold different experts: the first ep_dp
  // replicas are computed.
  const int replica = plan.pp * plan.tp * plan.ep_dp;
  for (int r = 0; r < replica; ++r) out[r] = rank_memory(specs, hp, plan, r, p, names);
  for (int r = replica; r < plan.world_size; ++r) out[r] = out[r % replica];
  return out;
}

VisionPlacement vision_placement(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                                 const Plan& plan, const MemoryParams& p, const EdgeNames& names) {
  VisionPlacement v;
  bool replicated = true;
  int64_t all_ranks_weights = 0;  // the first rank's weights, for the share the tower takes
  const int rank = rank_of(plan, 0, 0, 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    const model::TensorSpec& s = specs[i];
    const bool tower = s.component == model::Component::kVision, projector = s.component == model::Component::kProjector;
    const int64_t bytes = s.skip_load ? 0 : held_bytes(s, i, slice_for(s, hp, plan, rank, names), p);
    all_ranks_weights += bytes;
    if (!tower && !projector) continue;
    v.present = true;
    replicated = replicated && s.rule == model::ShardRule::kReplicated;
    (tower ? v.tower_bytes : v.projector_bytes) += bytes;
  }
  if (!v.present) return v;
  v.stage = 0;
  const int64_t held = v.tower_bytes + v.projector_bytes;
  const double share = all_ranks_weights > 0 ? 100.0 * static_cast<double>(held) / static_cast<double>(all_ranks_weights) : 0.0;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2g%%", share);
  const std::string per_rank = topology::format_bytes(held) + " per rank (" + pct + " of its weights)";
  if (!replicated) {  // no adapter declares this today; said as it is rather than assumed away
    v.placement = "tp-split";
    v.reason = "split over the tp ranks of stage pp0 by their specs' rules: " + per_rank;
    return v;
  }
  v.placement = "replicated";
  const std::string where = "on stage pp0 before its decoder layers, each of its " + std::to_string(plan.tp) +
                            " tp rank(s) holding tower and projector whole: " + per_rank;
  if (plan.tp == 1) {
    v.reason = "replicated " + where + "; with tp=1 there is no split to weigh";
    return v;
  }
  v.split_bytes = held / plan.tp;
  v.split_all_reduce_bytes_per_patch = 2 * hp.vision.n_layer_run * hp.vision.n_embd * p.bytes_per_activation;
  v.reason = "replicated " + where + "; split over tp=" + std::to_string(plan.tp) + " like the text layers they would hold " +
             topology::format_bytes(v.split_bytes) + " per rank (saving " + topology::format_bytes(held - v.split_bytes) + ")";
  if (v.split_all_reduce_bytes_per_patch > 0)
    v.reason += " at the cost of " + std::to_string(2 * hp.vision.n_layer_run) + " all-reduces per image (" +
                topology::format_bytes(v.split_all_reduce_bytes_per_patch) + " per patch)";
  v.reason += "; dayzero runs the tower replicated (a tp-split tower is not built)";
  return v;
}

Fit check_fit(const std::vector<RankMemory>& memory, int64_t cap) {
  Fit f;
  f.cap = cap;
  for (int r = 0; r < static_cast<int>(memory.size()); ++r) {
    if (f.worst_rank < 0 || memory[r].total() > f.worst_bytes) {
      f.worst_rank = r;
      f.worst_bytes = memory[r].total();
    }
  }
  return f;
}

std::string describe_fit(const Fit& f) {
  std::string s = "needs " + topology::format_bytes(f.worst_bytes) + " on rank " + std::to_string(f.worst_rank) + ", cap " +
                  topology::format_bytes(f.cap);
  if (!f.fits()) s += " (short by " + topology::format_bytes(f.shortfall()) + ")";
  return s;
}

}  // namespace dayzero::plan
