// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): q through an optional low-rank
// q_a -> RMSNorm -> q_b (or a plain q_proj); one shared kv_a projection to a compressed kv
// (RMSNorm'd, expanded per head by kv_b into k_nope and v) and a rotary key k_pe shared by
// all heads; RoPE (interleaved pairs when rope_interleave) on q_pe and k_pe; o_proj.
// The cache holds the expanded per-head k (nope + rope) and v, both padded with zeros to
// head_dim = max(qk_head_dim, v_head_dim): zeros change neither q.k nor the value rows kept.
// Not the absorbed (latent-cache) form. Heads split over tp; o_proj partial sums reduced.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/adapter.h"

namespace dayzero::model::blocks {

struct MlaNames {
  std::string q;                  // q_proj [n_head*qk, n_embd] (when q_lora_rank is 0)
  std::string q_a, q_a_norm, q_b;  // [q_lora, n_embd], [q_lora], [n_head*qk, q_lora]
  std::string kv_a, kv_a_norm, kv_b;  // [kv_lora+rope, n_embd], [kv_lora], [n_head*(nope+v), kv_lora]
  std::string o;                  // [n_embd, n_head*v]
};

MlaNames mla_names(const HParams& hp, int layer);
std::vector<TensorSpec> mla_specs(const HParams& hp, int layer);

// Sparse attention (DSA): from the q LoRA residual [n_tokens, q_lora_rank] (q_a after its norm,
// on the device), per row the positions in its sequence it may attend to (a subset of the
// causal ones). REQUIRES: q_lora_rank > 0 where one is given.
using KeySelector = std::function<std::vector<std::vector<int32_t>>(const Tensor& q_resid)>;

// Returns the attention output [n_tokens, n_embd] for x [n_tokens, n_embd] (normalised);
// appends each segment's keys and values to that sequence's cache of the layer
// ([n_ctx, n_head_local, head_dim]) and attends over it: causally, or over the keys `select`
// picks per row when given (softmax over those keys only, as transformers' masked attention).
// REQUIRES: the segments tile x's rows. Collective over the tp group.
Tensor mla_attention(LayerContext& ctx, const MlaNames& names, const Tensor& x, const KeySelector* select = nullptr);

// Rotates x[t, h, offset .. offset + rope_dim) in place at positions pos (host data, row
// stride `stride` floats per head): interleaved pairs (x0, x1), (x2, x3)... written back
// de-interleaved as HF's apply_rotary_pos_emb_interleave, or rotate-half when !interleave;
// cos/sin are multiplied by attention_factor (yarn). The backend's rope is rotate-half only.
void rope_host(float* x, int64_t n_tokens, int64_t n_head, int64_t stride, int64_t offset, int64_t rope_dim,
               const int32_t* pos, const float* inv_freq, float attention_factor, bool interleave);

}  // namespace dayzero::model::blocks
