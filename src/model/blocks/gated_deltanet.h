// Gated DeltaNet (qwen3_next, qwen3_5_moe): linear attention whose per-sequence state has a fixed
// size instead of a KV cache growing with the context. Per layer: in_proj of q/k/v/z/b/a, a short
// causal depthwise conv (SiLU) over [q | k | v] with its window of the last conv_kernel - 1
// inputs, L2-normalised q and k, per-head decay g = -exp(A_log) * softplus(a + dt_bias) and
// beta = sigmoid(b), the delta rule S_t = e^g S_{t-1} + k_t (beta (v_t - e^g S_{t-1}^T k_t))^T with
// o_t = S_t^T q_t / sqrt(k_head_dim) (chunked for prefill, recurrent for one-token decode), the
// gated RMSNorm w * rmsnorm(o) * silu(z) per v head, out_proj. Not Mamba, not the FLA kernels.
// Tensor parallel: key heads (each with its v_per_k value heads) split over tp like attention
// heads; every projection, the conv's channels, A_log and dt_bias are held for a rank's heads only
// (the [q | k | v] rows of in_proj_qkv and conv1d as a sectioned split), the gated norm's [dv]
// weight is shared by all heads, out_proj is row-parallel with one all-reduce. The conv and the
// recurrence run on the host (as MoE routing does).
#pragma once

#include <string>
#include <vector>

#include "model/adapter.h"

namespace dayzero::model::blocks {

// Two layouts of the input projections. qwen3_next: in_proj_qkvz rows grouped per key head
// [q dk | k dk | v r dv | z r dv] (r = v_per_k), in_proj_ba rows per key head [b r | a r].
// qwen3_5_moe (in_proj_qkv set): in_proj_qkv rows in the conv's order [q | k | v] (a rank's rows
// are three ranges, one per section), in_proj_z [n_v dv], in_proj_b and in_proj_a [n_v], all split
// by heads.
struct GatedDeltaNetNames {
  std::string in_proj_qkvz;  // [n_k * (2 dk + 2 r dv), n_embd]
  std::string in_proj_ba;    // [n_k * 2 r, n_embd]
  std::string in_proj_qkv, in_proj_z, in_proj_b, in_proj_a;  // the split layout (empty: qwen3_next's)
  std::string conv1d;        // [conv_dim, 1, conv_kernel], channels [q (n_k dk) | k (n_k dk) | v (n_v dv)]
  std::string dt_bias, a_log;  // [n_v]
  std::string norm;          // [dv]: the gated RMSNorm's weight (plain w, never 1 + w)
  std::string out_proj;      // [n_embd, n_v dv]
};

GatedDeltaNetNames gated_deltanet_names(int layer);  // model.layers.{L}.linear_attn.*
std::vector<TensorSpec> gated_deltanet_specs(const HParams& hp, int layer, const GatedDeltaNetNames& names);

// The token mixer's output [n_tokens, n_embd] for the normalised x [n_tokens, n_embd]; each
// segment reads and advances its sequence's state (a segment at pos0 0 starts from zero state).
// REQUIRES: every segment has conv_state, recurrent_state and state_pos, and pos0 is 0 or the
// position the state covers; n_k_heads % tp == 0. Collective over the tp group.
Tensor gated_deltanet(LayerContext& ctx, const GatedDeltaNetNames& names, const Tensor& x);

// The delta rule of h heads over n tokens, host f32 (exposed for tests). q, k [n, h, dk] are
// L2-normalised (the 1/sqrt(dk) query scale is applied here), v [n, h, dv], g and beta [n, h];
// state [h, dk, dv] is the state before the first token and is advanced in place; out [n, h, dv].
// The recurrent form steps token by token; the chunked form (chunk tokens at a time, a
// unit-lower-triangular solve per chunk) gives the same result up to rounding.
void delta_rule_recurrent(int64_t n, int64_t h, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out);
void delta_rule_chunked(int64_t n, int64_t h, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* state, float* out, int64_t chunk = 64);

}  // namespace dayzero::model::blocks
