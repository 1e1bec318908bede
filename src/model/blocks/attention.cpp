// Attention block: projections, optional q/k norm, RoPE (over every row of the batch at once),
// then per sequence segment the cache append and causal GQA over that sequence's cache; output.
#include "model/blocks/attention.h"

#include <cmath>

#include "backend/backend.h"

namespace dayzero::model::blocks {

namespace {
Tensor linear(backend::Backend& be, const Weights& w, const std::string& weight, const std::string& bias,
              const Tensor& x, int64_t n_tokens) {
  const Tensor& wt = w.get(weight);
  Tensor y = be.empty(DType::kF32, {n_tokens, wt.dim(0)});
  be.matmul(x, wt, y);
  if (!bias.empty()) be.add_bias(w.get(bias), y);
  return y;
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

Tensor attention(LayerContext& ctx, const AttentionNames& n, const Tensor& x) {
  auto& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n_tokens = x.dim(0), hd = hp.head_dim;
  const int64_t n_head = ctx.w.get(n.q).dim(0) / hd;     // local heads (tp-split weights)
  const int64_t n_head_kv = ctx.w.get(n.k).dim(0) / hd;

  Tensor q = linear(be, ctx.w, n.q, n.q_bias, x, n_tokens).reshape({n_tokens, n_head, hd});
  Tensor k = linear(be, ctx.w, n.k, n.k_bias, x, n_tokens).reshape({n_tokens, n_head_kv, hd});
  Tensor v = linear(be, ctx.w, n.v, n.v_bias, x, n_tokens).reshape({n_tokens, n_head_kv, hd});
  if (!n.q_norm.empty()) {
    be.rmsnorm(q, ctx.w.get(n.q_norm), static_cast<float>(hp.rms_eps), q);
    be.rmsnorm(k, ctx.w.get(n.k_norm), static_cast<float>(hp.rms_eps), k);
  }
  be.rope(q, ctx.positions, ctx.inv_freq);
  be.rope(k, ctx.positions, ctx.inv_freq);

  Tensor attn = be.empty(DType::kF32, {n_tokens, n_head, hd});
  cached_attention(ctx, q, k, v, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), attn);
  // Row-parallel output: partial sums over this rank's heads, reduced, then the bias once.
  Tensor out = linear(be, ctx.w, n.o, "", attn.reshape({n_tokens, n_head * hd}), n_tokens);
  ctx.reduce_tp(out);
  if (!n.o_bias.empty()) be.add_bias(ctx.w.get(n.o_bias), out);
  return out;
}

}  // namespace dayzero::model::blocks
