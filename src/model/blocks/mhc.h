// Manifold-constrained hyper-connections (mHC, DeepSeek-V4): the hc_mult residual streams a
// token carries instead of one residual, the per-block mixing weights computed from them (pre
// collapses the streams into the block's input, post expands the block's output back, comb mixes
// the streams and is projected onto doubly-stochastic matrices by Sinkhorn-Knopp), and the final
// hc_head collapse before the model norm. Host f32 arrays, computed in f32 as transformers does
// (modeling_deepseek_v4.py: DeepseekV4HyperConnection, DeepseekV4HyperHead). Not the attention or
// MoE blocks the streams wrap (blocks/v4_layer composes them).
#pragma once

#include <cstdint>
#include <span>

namespace dayzero::model::blocks {

struct HyperConnectionSizes {
  int64_t n_tokens = 0, hc = 0, d = 0;  // streams per token, width of each
  int64_t sinkhorn_iters = 20;          // hc_sinkhorn_iters (>= 1)
  float hc_eps = 1e-6f;                 // floor of pre and comb, and of Sinkhorn's divisions
  float rms_eps = 1e-6f;                // the unweighted RMSNorm of the flattened streams
};

// One block's mixing weights from its input streams and collapse of them:
//   x = rmsnorm(streams[t] flattened, no weight) [hc * d]; m = fn . x [(2 + hc) hc]
//   pre = sigmoid(m[0:hc] * scale[0] + base[0:hc]) + hc_eps
//   post = 2 sigmoid(m[hc:2hc] * scale[1] + base[hc:2hc])
//   comb = softmax_rows(m[2hc:] * scale[2] + base[2hc:]) + hc_eps  ([hc, hc], row j = input stream j),
//          then column-normalised once and (sinkhorn_iters - 1) times rows then columns, each
//          divided by its sum + hc_eps
//   collapsed[t] = sum_j pre[j] streams[t, j]
// streams [n_tokens, hc, d]; fn [(2 + hc) hc, hc d]; base [(2 + hc) hc]; scale [3];
// collapsed [n_tokens, d], post [n_tokens, hc], comb [n_tokens, hc, hc] are written.
// REQUIRES: every span of the size stated, sinkhorn_iters >= 1.
void hyper_connection_pre(const HyperConnectionSizes& s, std::span<const float> streams, std::span<const float> fn,
                          std::span<const float> base, std::span<const float> scale, std::span<float> collapsed,
                          std::span<float> post, std::span<float> comb);

// The streams after the block: streams[t, k] = post[t, k] block_out[t] + sum_j comb[t, j, k] streams[t, j]
// (comb consumed transposed, as the reference does), in place.
// streams [n_tokens, hc, d]; block_out [n_tokens, d]; post [n_tokens, hc]; comb [n_tokens, hc, hc].
void hyper_connection_post(const HyperConnectionSizes& s, std::span<float> streams, std::span<const float> block_out,
                           std::span<const float> post, std::span<const float> comb);

// The final collapse (hc_head): pre = sigmoid(fn . rmsnorm(streams[t]) * scale[0] + base) + hc_eps,
// out[t] = sum_j pre[j] streams[t, j]. fn [hc, hc d]; base [hc]; scale [1]; out [n_tokens, d].
void hyper_head(const HyperConnectionSizes& s, std::span<const float> streams, std::span<const float> fn,
                std::span<const float> base, std::span<const float> scale, std::span<float> out);

}  // namespace dayzero::model::blocks
