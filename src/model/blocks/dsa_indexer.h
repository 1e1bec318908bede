// DeepSeek Sparse Attention's lightning indexer (deepseek_v32, glm_moe_dsa): per query, the
// index_topk keys of its sequence that MLA attends to. Its own query from the q LoRA residual
// (wq_b), one key head (wk, LayerNorm with bias, eps 1e-6) kept in the layer's indexer key cache,
// RoPE on the leading qk_rope_head_dim of each head (rotate-half or interleaved pairs:
// DsaParams::rope_interleave), scores sum_h w_h relu(q_h . k / sqrt(D)) with w = weights_proj(x) /
// sqrt(n_heads). A layer may reuse the previous layer's selection instead (DsaParams::shared).
// Not the FP8 / Hadamard kernels of the reference code (the Hadamard rotation preserves dot
// products; FP8 is a precision shortcut). Weights replicated.
#pragma once

#include <string>
#include <vector>

#include "model/adapter.h"

namespace dayzero::model::blocks {

struct IndexerNames {
  std::string wq_b;          // [index_n_heads * index_head_dim, q_lora_rank]
  std::string wk;            // [index_head_dim, n_embd]
  std::string k_norm, k_norm_bias;  // [index_head_dim] each
  std::string weights_proj;  // [index_n_heads, n_embd]
};

IndexerNames indexer_names(int layer);
// Every indexer tensor is replicated (each tp rank selects the same keys). None for a layer
// that reuses the previous selection (hp.deepseek().dsa.reuses_topk).
std::vector<TensorSpec> indexer_specs(const HParams& hp, int layer);

// The keys each row of the batch attends to: for row r of a segment at position p, the positions
// (ascending, in that sequence) of the min(index_topk, p + 1) causal keys of highest index score,
// ties to the lower position. Appends each segment's indexer keys to seg.index_k_cache first.
// x [n_tokens, n_embd] is the attention input, q_resid [n_tokens, q_lora_rank] the normalised
// q_a projection (both on the device). Emits `layers.{L}.index_topk_ids` [n_tokens, index_topk]
// (positions as float32, ascending, -1 past the keys kept). REQUIRES: every segment has an
// index_k_cache. No communication.
std::vector<std::vector<int32_t>> dsa_select_keys(LayerContext& ctx, const IndexerNames& names, int layer,
                                                   const Tensor& x, const Tensor& q_resid);

// The keys of layer `layer`: its own indexer's (dsa_select_keys, then kept in ctx.dsa_keys), or,
// where hp.deepseek().dsa.reuses_topk(layer), the selection of the previous layer kept in ctx.dsa_keys (no
// dump point, no cache). REQUIRES for a reusing layer: an earlier layer of this forward call on
// this stage selected keys (the planner starts no stage at such a layer). No communication.
std::vector<std::vector<int32_t>> dsa_layer_keys(LayerContext& ctx, int layer, const Tensor& x,
                                                  const Tensor& q_resid);

}  // namespace dayzero::model::blocks
