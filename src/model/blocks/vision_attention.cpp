// Bidirectional self-attention of a vision encoder layer (vision.h): q/k/v (fused or separate,
// with bias), all heads over all of one image's tokens, no mask and no KV cache; output
// projection. Every tp rank holds the whole tower (replicated), so there is no reduction.
#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "model/blocks/vision.h"

namespace dayzero::model::blocks {

Tensor vision_attention(const VisionContext& ctx, int layer, const Tensor& x) {
  auto& be = ctx.be;
  const VisionNames& n = ctx.names;
  const int64_t n_tok = x.dim(0), d = ctx.vp.n_embd, n_head = ctx.vp.n_head, hd = d / n_head;
  auto proj = [&](const std::string& w, const std::string& b) {
    const Tensor& wt = ctx.w.get(layer_tensor_name(w, layer));
    Tensor y = be.empty(DType::kF32, {n_tok, wt.dim(0)});
    be.matmul(x, wt, y);
    if (!b.empty()) be.add_bias(ctx.w.get(layer_tensor_name(b, layer)), y);
    return y;
  };
  Tensor q, k, v;
  if (ctx.vp.fused_qkv) {
    // [n_tok, 3 * d] split into its thirds (q, k, v in that order).
    Tensor qkv = proj(n.qkv_w, n.qkv_b);
    Tensor host = Tensor::host(DType::kF32, qkv.shape());
    be.to_host(qkv, host);
    Tensor parts[3] = {Tensor::host(DType::kF32, {n_tok, d}), Tensor::host(DType::kF32, {n_tok, d}),
                       Tensor::host(DType::kF32, {n_tok, d})};
    for (int64_t t = 0; t < n_tok; ++t)
      for (int j = 0; j < 3; ++j)
        std::copy_n(host.f32() + (t * 3 + j) * d, d, parts[j].f32() + t * d);
    q = be.to_device(parts[0]);
    k = be.to_device(parts[1]);
    v = be.to_device(parts[2]);
  } else {
    q = proj(n.q_w, n.q_b);
    k = proj(n.k_w, n.k_b);
    v = proj(n.v_w, n.v_b);
  }
  if (ctx.vp.rope == VisionParams::Rope2d::kInterleaved) {
    DZ_CHECK(ctx.grid_w > 0 && ctx.grid_h * ctx.grid_w == n_tok, "2-D rotary embedding without the patch grid");
    for (Tensor* t : {&q, &k}) {
      Tensor host = Tensor::host(DType::kF32, t->shape());
      be.to_host(*t, host);
      rope_2d_interleaved(host.f32(), ctx.grid_h, ctx.grid_w, n_head, hd, ctx.vp.rope_theta);
      *t = be.to_device(host);
    }
  }
  Tensor attn = be.empty(DType::kF32, {n_tok, n_head, hd});
  be.attention_full(q.reshape({n_tok, n_head, hd}), k.reshape({n_tok, n_head, hd}), v.reshape({n_tok, n_head, hd}),
                    static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), attn);
  Tensor out = be.empty(DType::kF32, {n_tok, d});
  be.matmul(attn.reshape({n_tok, d}), ctx.w.get(layer_tensor_name(n.o_w, layer)), out);
  if (!n.o_b.empty()) be.add_bias(ctx.w.get(layer_tensor_name(n.o_b, layer)), out);
  return out;
}

}  // namespace dayzero::model::blocks
