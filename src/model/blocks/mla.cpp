// MLA: projections on the backend over every row of the batch, the per-head assembly and RoPE
// (per-row positions) on the host, then cache append and attention per sequence segment.
#include "model/blocks/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "model/blocks/attention.h"
#include "model/blocks/block_util.h"

namespace dayzero::model::blocks {
namespace {

Tensor linear(backend::Backend& be, const Tensor& w, const Tensor& x) {
  Tensor y = be.empty(DType::kF32, {x.dim(0), w.dim(0)});
  be.matmul(x, w, y);
  return y;
}

// The keys and values of each segment appended to its cache, then each row attends over the
// positions `keys` lists for it: q, k, v host [n_rows, n_head, hd]; out host [n_rows, n_head, hd].
void selected_attention(LayerContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                        const std::vector<std::vector<int32_t>>& keys, Tensor& out) {
  auto& be = ctx.be;
  const int64_t n_head = q.dim(1), hd = q.dim(2), row_elems = n_head * hd;
  for (const SeqSegment& s : ctx.segments) {
    Tensor k_rows = s.k_cache->rows(s.pos0, s.pos0 + s.n_rows);
    Tensor v_rows = s.v_cache->rows(s.pos0, s.pos0 + s.n_rows);
    be.copy(be.to_device(k.rows(s.row0, s.row0 + s.n_rows)), k_rows);
    be.copy(be.to_device(v.rows(s.row0, s.row0 + s.n_rows)), v_rows);
    const int64_t n_keys = s.pos0 + s.n_rows;
    const Tensor kc = host_copy(be, s.k_cache->rows(0, n_keys)), vc = host_copy(be, s.v_cache->rows(0, n_keys));
    std::vector<float> p;
    std::vector<double> acc(static_cast<size_t>(hd));
    for (int64_t r = s.row0; r < s.row0 + s.n_rows; ++r) {
      const std::vector<int32_t>& sel = keys[static_cast<size_t>(r)];
      p.resize(sel.size());
      for (int64_t h = 0; h < n_head; ++h) {
        const float* qh = q.f32() + r * row_elems + h * hd;
        float mx = -INFINITY;
        for (size_t j = 0; j < sel.size(); ++j) {
          const float* kh = kc.f32() + sel[j] * row_elems + h * hd;
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) dot += static_cast<double>(qh[i]) * kh[i];
          p[j] = static_cast<float>(dot) * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (float& e : p) sum += (e = std::exp(e - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t j = 0; j < sel.size(); ++j) {
          const float* vh = vc.f32() + sel[j] * row_elems + h * hd;
          for (int64_t i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] += static_cast<double>(p[j]) * vh[i];
        }
        float* o = out.f32() + r * row_elems + h * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[static_cast<size_t>(i)] / sum);
      }
    }
  }
}

}  // namespace

MlaNames mla_names(const HParams& hp, int layer) {
  MlaNames n;
  if (hp.deepseek().mla.q_lora_rank > 0) {
    n.q_a = L("model.layers.{L}.self_attn.q_a_proj.weight", layer);
    n.q_a_norm = L("model.layers.{L}.self_attn.q_a_layernorm.weight", layer);
    n.q_b = L("model.layers.{L}.self_attn.q_b_proj.weight", layer);
  } else {
    n.q = L("model.layers.{L}.self_attn.q_proj.weight", layer);
  }
  n.kv_a = L("model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight", layer);
  n.kv_a_norm = L("model.layers.{L}.self_attn.kv_a_layernorm.weight", layer);
  n.kv_b = L("model.layers.{L}.self_attn.kv_b_proj.weight", layer);
  n.o = L("model.layers.{L}.self_attn.o_proj.weight", layer);
  return n;
}

std::vector<TensorSpec> mla_specs(const HParams& hp, int layer) {
  const MlaParams& m = hp.deepseek().mla;
  const MlaNames n = mla_names(hp, layer);
  const int64_t d = hp.n_embd, qk = m.qk_head_dim(), kvb = m.qk_nope_head_dim + m.v_head_dim;
  using R = ShardRule;
  std::vector<TensorSpec> s;
  if (m.q_lora_rank > 0) {
    s.push_back({n.q_a, {m.q_lora_rank, d}, R::kReplicated, layer});
    s.push_back({n.q_a_norm, {m.q_lora_rank}, R::kReplicated, layer});
    s.push_back({n.q_b, {hp.n_head * qk, m.q_lora_rank}, R::kSplitDim0, layer, qk});
  } else {
    s.push_back({n.q, {hp.n_head * qk, d}, R::kSplitDim0, layer, qk});
  }
  s.push_back({n.kv_a, {m.kv_lora_rank + m.qk_rope_head_dim, d}, R::kReplicated, layer});
  s.push_back({n.kv_a_norm, {m.kv_lora_rank}, R::kReplicated, layer});
  s.push_back({n.kv_b, {hp.n_head * kvb, m.kv_lora_rank}, R::kSplitDim0, layer, kvb});
  s.push_back({n.o, {d, hp.n_head * m.v_head_dim}, R::kSplitDim1, layer, m.v_head_dim});
  set_component(s, 0, Component::kAttention);
  for (auto& t : s)
    if (t.shape.size() == 1) t.component = Component::kNorm;  // q_a_norm, kv_a_norm
  return s;
}

void rope_host(float* x, int64_t n_tokens, int64_t n_head, int64_t stride, int64_t offset, int64_t rope_dim,
               const int32_t* pos, const float* inv_freq, float attention_factor, bool interleave) {
  const int64_t half = rope_dim / 2;
  std::vector<float> a(half), b(half), c(half), s(half);
  for (int64_t t = 0; t < n_tokens; ++t) {
    // As HF: freqs = pos * inv_freq in f32, cos/sin in f32 times the yarn attention factor.
    for (int64_t i = 0; i < half; ++i) {
      const float f = static_cast<float>(pos[t]) * inv_freq[i];
      c[i] = std::cos(f) * attention_factor;
      s[i] = std::sin(f) * attention_factor;
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* p = x + (t * n_head + h) * stride + offset;
      for (int64_t i = 0; i < half; ++i) {
        a[i] = interleave ? p[2 * i] : p[i];
        b[i] = interleave ? p[2 * i + 1] : p[half + i];
      }
      for (int64_t i = 0; i < half; ++i) {
        p[i] = a[i] * c[i] - b[i] * s[i];
        p[half + i] = b[i] * c[i] + a[i] * s[i];
      }
    }
  }
}

Tensor mla_attention(LayerContext& ctx, const MlaNames& n, const Tensor& x, const KeySelector* select) {
  auto& be = ctx.be;
  const HParams& hp = ctx.hp;
  const MlaParams& m = hp.deepseek().mla;
  const int64_t n_tokens = x.dim(0), nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, vd = m.v_head_dim;
  const int64_t qk = m.qk_head_dim(), hd = ctx.segments.front().k_cache->dim(2), lora = m.kv_lora_rank;
  // transformers builds q_a_layernorm / kv_a_layernorm as DeepseekV3RMSNorm(rank) with its
  // default eps 1e-6, whatever rms_norm_eps says.
  constexpr float eps = 1e-6f;

  Tensor q;  // [n_tokens, n_head_local * qk]
  std::vector<std::vector<int32_t>> keys;  // per row, when select is given
  if (m.q_lora_rank > 0) {
    Tensor qa = linear(be, ctx.w.get(n.q_a), x);
    be.rmsnorm(qa, ctx.w.get(n.q_a_norm), eps, qa);
    q = linear(be, ctx.w.get(n.q_b), qa);
    if (select) keys = (*select)(qa);
  } else {
    DZ_CHECK(select == nullptr, "sparse MLA needs a q LoRA residual (q_lora_rank > 0)");
    q = linear(be, ctx.w.get(n.q), x);
  }
  const int64_t n_head = q.dim(1) / qk;  // local heads (tp-split weights)
  Tensor ckv = host_copy(be, linear(be, ctx.w.get(n.kv_a), x));  // [n_tokens, lora + rope]
  Tensor kv_c = Tensor::host(DType::kF32, {n_tokens, lora});
  for (int64_t t = 0; t < n_tokens; ++t)
    std::memcpy(kv_c.f32() + t * lora, ckv.f32() + t * (lora + rope), static_cast<size_t>(lora) * 4);
  Tensor kv_c_dev = be.to_device(kv_c);
  be.rmsnorm(kv_c_dev, ctx.w.get(n.kv_a_norm), eps, kv_c_dev);
  Tensor kv = host_copy(be, linear(be, ctx.w.get(n.kv_b), kv_c_dev));  // [n_tokens, n_head * (nope + vd)]
  Tensor q_host = host_copy(be, q);

  // q_full/k_full/v_full [n_tokens, n_head, hd], zero-padded past qk / vd.
  Tensor qf = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
  Tensor kf = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
  Tensor vf = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
  std::memset(qf.f32(), 0, qf.bytes());
  std::memset(kf.f32(), 0, kf.bytes());
  std::memset(vf.f32(), 0, vf.bytes());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      float* qd = qf.f32() + (t * n_head + h) * hd;
      float* kd = kf.f32() + (t * n_head + h) * hd;
      float* vdst = vf.f32() + (t * n_head + h) * hd;
      const float* kvh = kv.f32() + t * n_head * (nope + vd) + h * (nope + vd);
      std::memcpy(qd, q_host.f32() + (t * n_head + h) * qk, static_cast<size_t>(qk) * 4);
      std::memcpy(kd, kvh, static_cast<size_t>(nope) * 4);
      std::memcpy(kd + nope, ckv.f32() + t * (lora + rope) + lora, static_cast<size_t>(rope) * 4);
      std::memcpy(vdst, kvh + nope, static_cast<size_t>(vd) * 4);
    }
  Tensor pos_host = Tensor::host(DType::kI32, {n_tokens});
  be.to_host(ctx.positions, pos_host);
  Tensor inv_host = Tensor::host(DType::kF32, ctx.inv_freq.shape());
  be.to_host(ctx.inv_freq, inv_host);
  const auto* pos = static_cast<const int32_t*>(pos_host.data());
  const auto factor = static_cast<float>(rope_attention_factor(hp.rope_scaling));
  rope_host(qf.f32(), n_tokens, n_head, hd, nope, rope, pos, inv_host.f32(), factor, m.rope_interleave);
  rope_host(kf.f32(), n_tokens, n_head, hd, nope, rope, pos, inv_host.f32(), factor, m.rope_interleave);

  Tensor attn_host;  // [n_tokens, n_head, hd]
  if (select) {
    attn_host = Tensor::host(DType::kF32, {n_tokens, n_head, hd});
    selected_attention(ctx, qf, kf, vf, static_cast<float>(m.softmax_scale), keys, attn_host);
  } else {
    const Tensor k_dev = be.to_device(kf), v_dev = be.to_device(vf), q_dev = be.to_device(qf);
    Tensor attn = be.empty(DType::kF32, {n_tokens, n_head, hd});
    cached_attention(ctx, q_dev, k_dev, v_dev, static_cast<float>(m.softmax_scale), attn);
    attn_host = host_copy(be, attn);
  }
  Tensor packed = Tensor::host(DType::kF32, {n_tokens, n_head * vd});
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_head; ++h)
      std::memcpy(packed.f32() + (t * n_head + h) * vd, attn_host.f32() + (t * n_head + h) * hd,
                  static_cast<size_t>(vd) * 4);
  // Row-parallel output: partial sums over this rank's heads.
  Tensor out = linear(be, ctx.w.get(n.o), be.to_device(packed));
  ctx.reduce_tp(out);
  return out;
}

}  // namespace dayzero::model::blocks
