// The memory model (memory.h): exact weight slices, KV cache, activations, headroom per rank.
#include "plan/memory.h"

#include "core/check.h"
#include "plan/topology.h"

namespace dayzero::plan {

int64_t local_kv_heads(const model::HParams& hp, int tp) {
  if (hp.n_head_kv % tp == 0) return hp.n_head_kv / tp;
  DZ_CHECK(tp % hp.n_head_kv == 0, hp.n_head_kv << " kv heads over tp=" << tp);
  return 1;
}

int64_t kv_cache_bytes(const model::HParams& hp, int64_t n_layers, int tp, const MemoryParams& p) {
  return 2 * n_layers * local_kv_heads(hp, tp) * hp.head_dim * p.max_context_tokens * p.batch *
         p.bytes_per_activation;
}

int64_t activation_bytes(const model::HParams& hp, int tp, bool last_stage, const MemoryParams& p) {
  const int64_t T = p.max_context_tokens * p.batch;
  const int64_t width = 4 * hp.n_embd + 2 * (hp.n_head / tp) * hp.head_dim + 2 * local_kv_heads(hp, tp) * hp.head_dim +
                        2 * (hp.n_ff / tp);
  int64_t bytes = p.bytes_per_activation * T * width;
  if (last_stage) bytes += 4 * T * ((hp.n_vocab + tp - 1) / tp);
  return bytes;
}

RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp, const Plan& plan,
                       int rank, const MemoryParams& p, const EdgeNames& names) {
  RankMemory m;
  for (const auto& s : specs) m.weights += slice_bytes(s, slice_for(s, hp, plan, rank, names), p.bytes_per_weight);
  const Stage& st = plan.stage_of(rank);
  m.kv_cache = kv_cache_bytes(hp, st.layer_end - st.layer_begin, plan.tp, p);
  m.activations = activation_bytes(hp, plan.tp, st.has_lm_head, p);
  m.headroom = p.headroom_bytes;
  return m;
}

std::vector<RankMemory> estimate_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                                        const Plan& plan, const MemoryParams& p, const EdgeNames& names) {
  std::vector<RankMemory> out(plan.world_size);
  const int replica = plan.pp * plan.tp;
  for (int r = 0; r < replica; ++r) out[r] = rank_memory(specs, hp, plan, r, p, names);
  for (int r = replica; r < plan.world_size; ++r) out[r] = out[r % replica];
  return out;
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
  std::string s = "needs " + format_bytes(f.worst_bytes) + " on rank " + std::to_string(f.worst_rank) + ", cap " +
                  format_bytes(f.cap);
  if (!f.fits()) s += " (short by " + format_bytes(f.shortfall()) + ")";
  return s;
}

}  // namespace dayzero::plan
