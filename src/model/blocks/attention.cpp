// Attention block: projections, optional q/k norm, RoPE (over every row of the batch at once),
// then per sequence segment the cache append and causal GQA over that sequence's cache; output.
#include "model/blocks/attention.h"

#include <array>
#include <cmath>

#include "backend/backend.h"
#include "model/blocks/norm.h"

namespace dayzero::model::blocks {

namespace {
Tensor linear(backend::Backend& be, const Weights& w, const std::string& weight, const std::string& bias,
              const Tensor& x, int64_t n_tokens) {
  const Tensor& wt = w.get(weight);
  Tensor y = be.empty_output(DType::kF32, {n_tokens, wt.dim(0)});
  be.matmul(x, wt, y);
  if (!bias.empty()) be.add_bias(w.get(bias), y);
  return y;
}

// The q, k and v projections of x as one backend op (matmul_shared_x), each with its bias.
std::array<Tensor, 3> qkv_projections(backend::Backend& be, const Weights& w, const AttentionNames& n, const Tensor& x,
                                      int64_t n_tokens) {
  const Tensor* ws[] = {&w.get(n.q), &w.get(n.k), &w.get(n.v)};
  std::array<Tensor, 3> ys;
  Tensor* yp[3];
  for (int i = 0; i < 3; ++i) {
    ys[i] = be.empty_output(DType::kF32, {n_tokens, ws[i]->dim(0)});
    yp[i] = &ys[i];
  }
  be.matmul_shared_x(x, ws, yp);
  const std::string* biases[] = {&n.q_bias, &n.k_bias, &n.v_bias};
  for (int i = 0; i < 3; ++i)
    if (!biases[i]->empty()) be.add_bias(w.get(*biases[i]), ys[i]);
  return ys;
}
}  // namespace

void cached_attention(LayerContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  // Each sequence appends to its own cache and attends over it: rows of other sequences of
  // the batch are never seen.
  for (const SeqSegment& s : ctx.segments) {
    const int64_t r0 = s.row0, r1 = s.row0 + s.n_rows;
    Tensor k_rows = s.k_cache->rows(s.pos0, s.pos0 + s.n_rows);
    Tensor v_rows = s.v_cache->rows(s.pos0, s.pos0 + s.n_rows);
    ctx.be.copy(k.rows(r0, r1), k_rows);
    ctx.be.copy(v.rows(r0, r1), v_rows);
    Tensor out_rows = out.rows(r0, r1);
    ctx.be.attention(q.rows(r0, r1), *s.k_cache, *s.v_cache, s.pos0, scale, out_rows);
  }
}

void rope_heads(LayerContext& ctx, Tensor& x) {
  const int64_t hd = x.dim(2), rd = ctx.hp.rope_dim;
  if (rd <= 0 || rd == hd) return ctx.be.rope(x, ctx.positions, ctx.inv_freq);
  // Partial rotary: the leading rd of each head through the backend's rope, the rest untouched.
  const int64_t rows = x.dim(0) * x.dim(1);
  Tensor host = Tensor::host(DType::kF32, x.shape());
  ctx.be.to_host(x, host);
  Tensor part = Tensor::host(DType::kF32, {x.dim(0), x.dim(1), rd});
  for (int64_t i = 0; i < rows; ++i) std::copy_n(host.f32() + i * hd, rd, part.f32() + i * rd);
  Tensor part_d = ctx.be.to_device(part);
  ctx.be.rope(part_d, ctx.positions, ctx.inv_freq);
  ctx.be.to_host(part_d, part);
  for (int64_t i = 0; i < rows; ++i) std::copy_n(part.f32() + i * rd, rd, host.f32() + i * hd);
  ctx.be.copy(ctx.be.to_device(host), x);
}

Tensor attention(LayerContext& ctx, const AttentionNames& n, const Tensor& x) {
  auto& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n_tokens = x.dim(0), hd = hp.head_dim;
  const int64_t n_head = ctx.w.get(n.q).dim(0) / (n.q_gate ? 2 * hd : hd);  // local heads (tp-split weights)
  const int64_t n_head_kv = ctx.w.get(n.k).dim(0) / hd;

  auto [q_rows, k_rows, v_rows] = qkv_projections(be, ctx.w, n, x, n_tokens);
  Tensor q, gate;  // [n_tokens, n_head, hd] each
  if (n.q_gate) {
    // Per head [q | gate] rows: split on the host into two [n_tokens, n_head, hd] tensors.
    const Tensor& qg = q_rows;
    Tensor qg_host = Tensor::host(DType::kF32, qg.shape());
    be.to_host(qg, qg_host);
    Tensor q_host = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
    Tensor g_host = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
    for (int64_t i = 0; i < n_tokens * n_head; ++i) {
      std::copy_n(qg_host.f32() + i * 2 * hd, hd, q_host.f32() + i * hd);
      std::copy_n(qg_host.f32() + i * 2 * hd + hd, hd, g_host.f32() + i * hd);
    }
    q = be.to_device(q_host);
    gate = g_host;
  } else {
    q = q_rows.reshape({n_tokens, n_head, hd});
  }
  Tensor k = k_rows.reshape({n_tokens, n_head_kv, hd});
  Tensor v = v_rows.reshape({n_tokens, n_head_kv, hd});
  if (!n.q_norm.empty()) {
    rms_norm(be, hp, q, ctx.w.get(n.q_norm), q);
    rms_norm(be, hp, k, ctx.w.get(n.k_norm), k);
  }
  rope_heads(ctx, q);
  rope_heads(ctx, k);

  Tensor attn = be.empty_output(DType::kF32, {n_tokens, n_head, hd});  // every segment's rows written
  cached_attention(ctx, q, k, v, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), attn);
  if (n.q_gate) {
    Tensor a_host = Tensor::host(DType::kF32, attn.shape());
    be.to_host(attn, a_host);
    for (int64_t i = 0; i < a_host.numel(); ++i)
      a_host.f32()[i] *= static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gate.f32()[i]))));
    be.copy(be.to_device(a_host), attn);
  }
  // Row-parallel output: partial sums over this rank's heads, reduced, then the bias once.
  Tensor out = linear(be, ctx.w, n.o, "", attn.reshape({n_tokens, n_head * hd}), n_tokens);
  ctx.reduce_tp(out);
  if (!n.o_bias.empty()) be.add_bias(ctx.w.get(n.o_bias), out);
  return out;
}

}  // namespace dayzero::model::blocks
