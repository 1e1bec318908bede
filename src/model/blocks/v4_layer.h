// DeepSeek-V4's decoder layer over the runtime's tensors (transformers' DeepseekV4DecoderLayer):
// the hc_mult residual streams of each row mixed into the attention's input and back out
// (blocks/mhc), the attention of its layer type with its compressor and lightning indexer
// (blocks/v4_attention, v4_compressor, v4_indexer), then the same around the MoE (blocks/
// v4_routing's choice, the routed experts through moe_experts so that expert parallelism and
// wide EP work as for every MoE family, the shared expert through swiglu_mlp, both with the
// swiglu_limit clamp). Also the entry into the streams (the embedding repeated hc_mult times)
// and the hc_head collapse before the final norm.
//
// The attention's heads (with their sinks and output groups) split over tp, the partial output
// all-reduced; the compressors, the indexer and the mixing are replicated. The attention, the
// compressors and the indexer run on the host in f32 (plain loops; their weights dequantised per
// call from what the backend keeps), the router and experts through the backend's GEMMs.
// Dump points per layer: attn_norm, attn_out, ffn_norm, ffn_out (rows [n, n_embd]), index_topk_ids
// (CSA layers: each row's chosen compressed entries, -1 none), router_logits, topk_ids and
// layer_out (the streams, [n, hc_mult * n_embd]); hc_head (the collapsed rows) before the norm.
#pragma once

#include <memory>

#include "model/adapter.h"
#include "model/blocks/v4_attention.h"
#include "model/blocks/v4_compressor.h"

namespace dayzero::model::blocks {

// One sequence's state of one layer: the window's K=V entries, the attention compressor's and
// (CSA) the indexer compressor's tails and entries.
struct V4LayerState final : LayerState {
  V4WindowCache window;
  CompressorState kv, index;
  int64_t reserved = 0;  // bytes reserved for the context it was made for
  int64_t bytes() const override { return reserved; }
};

// A state for a context of n_ctx tokens with every buffer reserved up front (f32): window - 1
// entries of head_dim, n_ctx / rate compressed entries of head_dim and of index_head_dim, and
// the compressors' pending windows and overlaps.
std::unique_ptr<LayerState> v4_layer_state(const HParams& hp, int layer, int64_t n_ctx);

// hidden [n, hc_mult * n_embd] in place. Collective over the tp group (and the expert group).
void v4_layer(LayerContext& ctx, int layer, Tensor& hidden);

// residual [n, hc_mult * n_embd]: each embedded row [n, n_embd] repeated hc_mult times.
void v4_enter_streams(backend::Backend& be, const HParams& hp, const Tensor& embedded, Tensor& residual);

// out [n, n_embd]: the hc_head collapse of residual (dump point hc_head).
void v4_leave_streams(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& residual, Tensor& out,
                      ActivationSink* sink);

}  // namespace dayzero::model::blocks
