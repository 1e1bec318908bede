// The pre-norm decoder layer of Llama-like families, with its dump points:
//   attn_norm = rmsnorm(h); attn_out = attention(attn_norm); h += attn_out;
//   ffn_norm = rmsnorm(h); ffn_out = mlp(ffn_norm); h += ffn_out  -> layer_out
// Tensor names follow HF's LlamaDecoderLayer; which optional parts exist comes from HParams.
#pragma once

#include <functional>

#include "model/adapter.h"

namespace dayzero::model::blocks {

// Tensor specs of one layer (shapes in PyTorch order, tp shard rules); with_mlp false leaves
// out the dense MLP for a layer whose feed-forward is something else (experts).
std::vector<TensorSpec> dense_decoder_specs(const HParams& hp, int layer, bool with_mlp = true);
// Specs of embedding, final norm and (untied) lm_head.
std::vector<TensorSpec> dense_model_specs(const HParams& hp);

// The feed-forward of a layer: [n_tokens, n_embd] from the normalised [n_tokens, n_embd].
using FfnFn = std::function<Tensor(LayerContext& ctx, int layer, const Tensor& x)>;
// The layer with the dense SwiGLU MLP, or with `ffn` when given.
void dense_decoder_layer(LayerContext& ctx, int layer, Tensor& hidden, const FfnFn& ffn = {});

}  // namespace dayzero::model::blocks
