// SwiGLU MLP block.
#include "model/blocks/mlp.h"

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
  be.swiglu(gate, up, gate);
  Tensor out = be.empty_output(DType::kF32, {n_tokens, down_w.dim(0)});
  be.matmul(gate, down_w, out);
  ctx.reduce_tp(out);
  if (!n.down_bias.empty()) be.add_bias(w.get(n.down_bias), out);
  return out;
}

}  // namespace dayzero::model::blocks
