// SwiGLU feed-forward: down(silu(gate(x)) * up(x)), optional biases, gate and up clamped first
// where hp.swiglu_limit says (DeepSeek-V4). Backend-agnostic.
#pragma once

#include <string>

#include "model/adapter.h"

namespace dayzero::model::blocks {

struct MlpNames {
  std::string gate, up, down;                   // [n_ff, n_embd], [n_ff, n_embd], [n_embd, n_ff]
  std::string gate_bias, up_bias, down_bias;    // empty when absent
};

// Returns [n_tokens, n_embd] for x [n_tokens, n_embd]. gate/up are column-parallel and down
// row-parallel over the tp group: the partial output is reduced before the down bias.
Tensor swiglu_mlp(const LayerContext& ctx, const MlpNames& names, const Tensor& x);

// gate = silu(gate) * up in place, gate clamped above at limit and up to [-limit, limit] first
// when limit > 0 (the clamp on the host: only DeepSeek-V4 has one). Used by the dense MLP and
// every routed expert.
void swiglu_limited(backend::Backend& be, double limit, Tensor& gate, Tensor& up);

}  // namespace dayzero::model::blocks
