// SwiGLU MLP block.
#include "model/blocks/mlp.h"

#include <algorithm>

#include "backend/backend.h"

namespace dayzero::model::blocks {

Tensor swiglu_mlp(const LayerContext& ctx, const MlpNames& n, const Tensor& x) {
  backend::Backend& be = ctx.be;
  const Weights& w = ctx.w;
  const int64_t n_tokens = x.dim(0);
  const Tensor& gate_w = w.get(n.gate);
  const Tensor& down_w = w.get(n.down);
  Tensor gate = be.empty_output(DType::kF32, {n_tokens, gate_w.dim(0)});
  Tensor up = be.empty_output(DType::kF32, {n_tokens, gate_w.dim(0)});
  const Tensor* ws[] = {&gate_w, &w.get(n.up)};
  Tensor* ys[] = {&gate, &up};
  be.matmul_shared_x(x, ws, ys);
  if (!n.gate_bias.empty()) be.add_bias(w.get(n.gate_bias), gate);
  if (!n.up_bias.empty()) be.add_bias(w.get(n.up_bias), up);
  swiglu_limited(be, ctx.hp.swiglu_limit, gate, up);
  Tensor out = be.empty_output(DType::kF32, {n_tokens, down_w.dim(0)});
  be.matmul(gate, down_w, out);
  ctx.reduce_tp(out);
  if (!n.down_bias.empty()) be.add_bias(w.get(n.down_bias), out);
  return out;
}

void swiglu_limited(backend::Backend& be, double limit, Tensor& gate, Tensor& up) {
  if (limit > 0) {
    const auto lim = static_cast<float>(limit);
    Tensor g = Tensor::host(DType::kF32, gate.shape()), u = Tensor::host(DType::kF32, up.shape());
    be.to_host(gate, g);
    be.to_host(up, u);
    for (int64_t i = 0; i < g.numel(); ++i) {
      g.f32()[i] = std::min(g.f32()[i], lim);
      u.f32()[i] = std::clamp(u.f32()[i], -lim, lim);
    }
    gate = be.to_device(g);
    up = be.to_device(u);
  }
  be.swiglu(gate, up, gate);
}

}  // namespace dayzero::model::blocks
