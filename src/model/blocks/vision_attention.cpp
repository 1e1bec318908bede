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
  // y [n_tok, rows of w] = x · w^T + b
  auto proj = [&](const Tensor& wt, const Tensor* b) {
    Tensor y = be.empty(DType::kF32, {n_tok, wt.dim(0)});
    be.matmul(x, wt, y);
    if (b) be.add_bias(*b, y);
    return y;
  };
  auto named = [&](const std::string& name) -> const Tensor* {
    return name.empty() ? nullptr : &ctx.w.get(layer_tensor_name(name, layer));
  };
  Tensor q, k, v;
  if (ctx.vp.fused_qkv) {
    // The fused weight [3 * d, d] and bias [3 * d] hold q, k, v in that order: one GEMM per
    // third of the weight's rows (views, no copy), so q, k and v come out contiguous.
    const Tensor& wqkv = *named(n.qkv_w);
    const Tensor* bqkv = named(n.qkv_b);
    Tensor* parts[3] = {&q, &k, &v};
    for (int j = 0; j < 3; ++j) {
      const Tensor bias = bqkv ? bqkv->reshape({3, d}).rows(j, j + 1).reshape({d}) : Tensor();
      *parts[j] = proj(wqkv.rows(j * d, (j + 1) * d), bqkv ? &bias : nullptr);
    }
  } else {
    q = proj(*named(n.q_w), named(n.q_b));
    k = proj(*named(n.k_w), named(n.k_b));
    v = proj(*named(n.v_w), named(n.v_b));
  }
  if (ctx.vp.rope == VisionParams::Rope2d::kInterleaved) {
    DZ_CHECK(ctx.grid_w > 0 && ctx.grid_h * ctx.grid_w == n_tok, "2-D rotary embedding without the patch grid");
    for (Tensor* t : {&q, &k}) {
      if (t->device().is_cpu()) {  // the CPU backend's tensors are host memory: rotate in place
        rope_2d_interleaved(t->f32(), ctx.grid_h, ctx.grid_w, n_head, hd, ctx.vp.rope_theta);
        continue;
      }
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
  be.matmul(attn.reshape({n_tok, d}), *named(n.o_w), out);
  if (const Tensor* ob = named(n.o_b)) be.add_bias(*ob, out);
  return out;
}

}  // namespace dayzero::model::blocks
