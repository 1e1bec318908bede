// The pre-norm decoder layer of Llama-like families, with its dump points:
//   attn_norm = rmsnorm(h); attn_out = attention(attn_norm); h += attn_out;
//   ffn_norm = rmsnorm(h); ffn_out = mlp(ffn_norm); h += ffn_out  -> layer_out
// Tensor names follow HF's LlamaDecoderLayer; which optional parts exist comes from HParams.
#pragma once

#include "model/adapter.h"

namespace dayzero::model::blocks {

// Tensor specs of one layer (shapes in PyTorch order, tp shard rules).
std::vector<TensorSpec> dense_decoder_specs(const HParams& hp, int layer);
// Specs of embedding, final norm and (untied) lm_head.
std::vector<TensorSpec> dense_model_specs(const HParams& hp);
void dense_decoder_layer(LayerContext& ctx, int layer, Tensor& hidden);

}  // namespace dayzero::model::blocks
