// DeepSeek-V4's attention core (transformers' DeepseekV4Attention with eager attention): q LoRA
// (wq_a, q_norm, wq_b) with a per-head unweighted RMSNorm, one shared K=V head (wkv, kv_norm),
// interleaved rotary on the trailing rope_dim channels, attention over the sliding window of
// this layer's own K=V entries plus the compressed entries a query may see (HCA: every entry
// closed by its position; CSA: the lightning indexer's picks), a learned sink per head in the
// softmax, the conjugate rotary on the output, and the grouped output projection (wo_a per group
// of heads, then wo_b). Host arrays in f32. Not the compressor or indexer (v4_compressor.h,
// v4_indexer.h, whose results it takes); blocks/v4_layer runs it per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dayzero::model::blocks {

// In place: x [width] times rsqrt(mean(x^2) + eps), times w when given (transformers' RMSNorm in
// f32, the mean summed in double). The one row norm of the DeepSeek-V4 blocks.
void v4_rmsnorm(float* x, int64_t width, const float* w, float eps);

struct V4AttentionSizes {
  int64_t d = 0, q_lora = 0, n_head = 0, head_dim = 0, rope_dim = 0;
  int64_t window = 0;                // sliding_window: a query sees positions (p - window, p]
  int64_t o_groups = 0, o_lora = 0;
  float rms_eps = 1e-6f;
};

// A layer's own K=V entries of one sequence: the last window - 1 positions before the call.
struct V4WindowCache {
  std::vector<float> kv;  // [kept, head_dim], oldest first
  int64_t end = 0;        // the position after the last kept entry
};

// Compressed entries one call sees: entries [n_entries, head_dim]; HCA (picks empty): query p
// sees every entry t < (p + 1) / rate; CSA: picks [n, topk] of each row (-1 none).
struct V4Compressed {
  std::span<const float> entries;
  int64_t n_entries = 0, rate = 0;
  std::span<const int32_t> picks;
  int64_t topk = 0;
};

// out [n, d] for the rows x [n, d] at positions cache.end .. cache.end + n - 1, which the
// cache then holds. wq_a [q_lora, d]; q_norm [q_lora]; wq_b [n_head * head_dim, q_lora]; wkv
// [head_dim, d]; kv_norm [head_dim]; sinks [n_head]; wo_a [o_groups * o_lora, n_head * head_dim
// / o_groups]; wo_b [d, o_groups * o_lora]; inv_freq [rope_dim / 2] (the main rotary on a sliding
// layer, the compressed one on CSA / HCA layers); compressed: none (n_entries 0) on a sliding
// layer. REQUIRES: spans of the sizes stated.
void v4_attention(const V4AttentionSizes& s, V4WindowCache& cache, std::span<const float> x, int64_t n,
                  std::span<const float> wq_a, std::span<const float> q_norm, std::span<const float> wq_b,
                  std::span<const float> wkv, std::span<const float> kv_norm, std::span<const float> sinks,
                  std::span<const float> wo_a, std::span<const float> wo_b, std::span<const float> inv_freq,
                  const V4Compressed& compressed, std::span<float> out);

}  // namespace dayzero::model::blocks
