// Gated DeltaNet: projections on the backend; conv, delta rule and gated norm on the host;
// out_proj row-parallel with one all-reduce.
#include "model/blocks/gated_deltanet.h"

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "model/blocks/block_util.h"

namespace dayzero::model::blocks {
namespace {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

GatedDeltaNetNames gated_deltanet_names(int layer) {
  GatedDeltaNetNames n;
  n.in_proj_qkvz = L("model.layers.{L}.linear_attn.in_proj_qkvz.weight", layer);
  n.in_proj_ba = L("model.layers.{L}.linear_attn.in_proj_ba.weight", layer);
  n.conv1d = L("model.layers.{L}.linear_attn.conv1d.weight", layer);
  n.dt_bias = L("model.layers.{L}.linear_attn.dt_bias", layer);
  n.a_log = L("model.layers.{L}.linear_attn.A_log", layer);
  n.norm = L("model.layers.{L}.linear_attn.norm.weight", layer);
  n.out_proj = L("model.layers.{L}.linear_attn.out_proj.weight", layer);
  return n;
}

std::vector<TensorSpec> gated_deltanet_specs(const HParams& hp, int layer, const GatedDeltaNetNames& n) {
  const LinearAttnParams& la = hp.hybrid().linear;
  const int64_t d = hp.n_embd, r = la.v_per_k(), dk = la.k_head_dim, dv = la.v_head_dim;
  const int64_t group = 2 * dk + 2 * r * dv;  // one key head's rows of in_proj_qkvz
  using R = ShardRule;
  std::vector<TensorSpec> s;
  if (n.in_proj_qkv.empty()) {
    s.push_back({n.in_proj_qkvz, {la.n_k_heads * group, d}, R::kSplitDim0, layer, group});
    s.push_back({n.in_proj_ba, {la.n_k_heads * 2 * r, d}, R::kSplitDim0, layer, 2 * r});
  } else {
    s.push_back({n.in_proj_qkv, {la.conv_dim(), d}, R::kSplitDim0, layer});
    s.push_back({n.in_proj_z, {la.value_dim(), d}, R::kSplitDim0, layer, r * dv});
    s.push_back({n.in_proj_b, {la.n_v_heads, d}, R::kSplitDim0, layer, r});
    s.push_back({n.in_proj_a, {la.n_v_heads, d}, R::kSplitDim0, layer, r});
  }
  const std::vector<TensorSpec> rest = {
      {n.conv1d, {la.conv_dim(), 1, la.conv_kernel}, R::kSplitDim0, layer},
      {n.dt_bias, {la.n_v_heads}, R::kSplitDim0, layer, r},
      {n.a_log, {la.n_v_heads}, R::kSplitDim0, layer, r},
      {n.out_proj, {d, la.value_dim()}, R::kSplitDim1, layer, r * dv},
  };
  s.insert(s.end(), rest.begin(), rest.end());
  // The conv's channels (and in_proj_qkv's rows) are [q | k | v]: each section by key head, the
  // values by a key head's r value heads, so a rank's q, k and v rows belong to the same heads.
  for (TensorSpec& t : s)
    if (t.name == n.in_proj_qkv || t.name == n.conv1d) t.shard_sections = {{la.key_dim(), dk}, {la.key_dim(), dk}, {la.value_dim(), r * dv}};
  set_component(s, 0, Component::kAttention);
  s.push_back({n.norm, {dv}, R::kReplicated, layer});
  s.back().component = Component::kNorm;
  return s;
}

void delta_rule_recurrent(int64_t n, int64_t h, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* state, float* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> mem(static_cast<size_t>(dv));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t hh = 0; hh < h; ++hh) {
      float* S = state + hh * dk * dv;  // [dk, dv]
      const float* qt = q + (t * h + hh) * dk;
      const float* kt = k + (t * h + hh) * dk;
      const float* vt = v + (t * h + hh) * dv;
      const float decay = static_cast<float>(std::exp(static_cast<double>(g[t * h + hh])));
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
      std::fill(mem.begin(), mem.end(), 0.0);
      for (int64_t a = 0; a < dk; ++a)
        for (int64_t b = 0; b < dv; ++b) mem[b] += static_cast<double>(S[a * dv + b]) * kt[a];
      const double bt = beta[t * h + hh];
      for (int64_t b = 0; b < dv; ++b) mem[b] = (vt[b] - mem[b]) * bt;  // the delta
      for (int64_t a = 0; a < dk; ++a)
        for (int64_t b = 0; b < dv; ++b) S[a * dv + b] += static_cast<float>(kt[a] * mem[b]);
      float* ot = out + (t * h + hh) * dv;
      for (int64_t b = 0; b < dv; ++b) {
        double acc = 0;
        for (int64_t a = 0; a < dk; ++a) acc += static_cast<double>(S[a * dv + b]) * qt[a];
        ot[b] = static_cast<float>(acc * scale);
      }
    }
  }
}

void delta_rule_chunked(int64_t n, int64_t h, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* state, float* out, int64_t chunk) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  const auto C = static_cast<size_t>(chunk);
  std::vector<double> S(static_cast<size_t>(dk * dv)), gam(C), lower(C * C), U(C * dv), W(C * dk), vn(C * dv);
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = state[hh * dk * dv + i];
    auto Q = [&](int64_t t, int64_t a) { return static_cast<double>(q[(t * h + hh) * dk + a]) * scale; };
    auto K = [&](int64_t t, int64_t a) { return static_cast<double>(k[(t * h + hh) * dk + a]); };
    auto V = [&](int64_t t, int64_t b) { return static_cast<double>(v[(t * h + hh) * dv + b]); };
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t len = std::min(chunk, n - c0);
      // Cumulative log decay inside the chunk.
      double acc = 0;
      for (int64_t i = 0; i < len; ++i) gam[i] = (acc += g[(c0 + i) * h + hh]);
      // The strictly lower system: (beta_i k_i . k_j) e^(gam_i - gam_j), j < i.
      for (int64_t i = 0; i < len; ++i) {
        const double bi = beta[(c0 + i) * h + hh];
        for (int64_t j = 0; j < i; ++j) {
          double dot = 0;
          for (int64_t a = 0; a < dk; ++a) dot += K(c0 + i, a) * K(c0 + j, a);
          lower[i * C + j] = bi * dot * std::exp(gam[i] - gam[j]);
        }
      }
      // (I + lower) U = beta v and (I + lower) W = beta k e^gam, by forward substitution.
      for (int64_t i = 0; i < len; ++i) {
        const double bi = beta[(c0 + i) * h + hh];
        for (int64_t b = 0; b < dv; ++b) U[i * dv + b] = bi * V(c0 + i, b);
        for (int64_t a = 0; a < dk; ++a) W[i * dk + a] = bi * K(c0 + i, a) * std::exp(gam[i]);
        for (int64_t j = 0; j < i; ++j) {
          const double l = lower[i * C + j];
          for (int64_t b = 0; b < dv; ++b) U[i * dv + b] -= l * U[j * dv + b];
          for (int64_t a = 0; a < dk; ++a) W[i * dk + a] -= l * W[j * dk + a];
        }
      }
      // The values the old state does not already predict: vn = U - W S.
      for (int64_t i = 0; i < len; ++i)
        for (int64_t b = 0; b < dv; ++b) {
          double x = U[i * dv + b];
          for (int64_t a = 0; a < dk; ++a) x -= W[i * dk + a] * S[a * dv + b];
          vn[i * dv + b] = x;
        }
      // Output: the decayed read of the old state plus the causal intra-chunk part.
      for (int64_t i = 0; i < len; ++i) {
        float* ot = out + ((c0 + i) * h + hh) * dv;
        std::vector<double> o(static_cast<size_t>(dv), 0.0);
        const double ei = std::exp(gam[i]);
        for (int64_t a = 0; a < dk; ++a) {
          const double qa = Q(c0 + i, a) * ei;
          for (int64_t b = 0; b < dv; ++b) o[b] += qa * S[a * dv + b];
        }
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t a = 0; a < dk; ++a) dot += Q(c0 + i, a) * K(c0 + j, a);
          const double w = dot * std::exp(gam[i] - gam[j]);
          for (int64_t b = 0; b < dv; ++b) o[b] += w * vn[j * dv + b];
        }
        for (int64_t b = 0; b < dv; ++b) ot[b] = static_cast<float>(o[b]);
      }
      // State after the chunk: S e^gam_last + sum_j k_j e^(gam_last - gam_j) vn_j^T.
      const double last = gam[len - 1];
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= std::exp(last);
      for (int64_t j = 0; j < len; ++j) {
        const double e = std::exp(last - gam[j]);
        for (int64_t a = 0; a < dk; ++a) {
          const double ka = K(c0 + j, a) * e;
          for (int64_t b = 0; b < dv; ++b) S[a * dv + b] += ka * vn[j * dv + b];
        }
      }
    }
    for (int64_t i = 0; i < dk * dv; ++i) state[hh * dk * dv + i] = static_cast<float>(S[i]);
  }
}

Tensor gated_deltanet(LayerContext& ctx, const GatedDeltaNetNames& nm, const Tensor& x) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const LinearAttnParams& la = hp.hybrid().linear;
  const int tp = ctx.tp_size;
  DZ_CHECK(la.n_k_heads % tp == 0, la.n_k_heads << " linear-attention key heads over tp=" << tp);
  const int64_t nk = la.n_k_heads / tp, r = la.v_per_k(), nv = nk * r, dk = la.k_head_dim, dv = la.v_head_dim;
  const int64_t K = la.conv_kernel, n = x.dim(0);
  const int64_t group = 2 * dk + 2 * r * dv, lc = 2 * nk * dk + nv * dv;  // local conv channels

  // Every tensor is held for this rank's heads only: conv1d's [q | k | v] channels and
  // in_proj_qkv's rows as the local [q | k | v] (sectioned split), A_log and dt_bias per local
  // value head.
  const Tensor conv_w = host_copy(be, ctx.w.get(nm.conv1d));  // [lc, 1, K]
  DZ_CHECK(conv_w.dim(0) == lc, nm.conv1d << ": " << conv_w.dim(0) << " channels held, expected " << lc);
  const Tensor a_log = host_copy(be, ctx.w.get(nm.a_log)), dt_bias = host_copy(be, ctx.w.get(nm.dt_bias));  // [nv]
  DZ_CHECK(a_log.dim(0) == nv && dt_bias.dim(0) == nv, nm.a_log << ": " << a_log.dim(0) << " heads held, expected " << nv);
  const Tensor norm_w = host_copy(be, ctx.w.get(nm.norm));

  // The conv input [n, lc] as [q | k | v] of the local heads; z [n, nv, dv]; b, a [n, nv].
  std::vector<float> mixed(static_cast<size_t>(n * lc)), z(static_cast<size_t>(n * nv * dv));
  std::vector<float> b_raw(static_cast<size_t>(n * nv)), a_raw(static_cast<size_t>(n * nv));
  auto project = [&](const std::string& name, int64_t rows) {
    const Tensor& w = ctx.w.get(name);
    DZ_CHECK(w.dim(0) == rows, name << ": " << w.dim(0) << " rows held, expected " << rows);
    Tensor y = be.empty(DType::kF32, {n, rows});
    be.matmul(x, w, y);
    return host_copy(be, y);
  };
  if (nm.in_proj_qkv.empty()) {
    const Tensor qkvz = project(nm.in_proj_qkvz, nk * group), ba = project(nm.in_proj_ba, nk * 2 * r);
    for (int64_t t = 0; t < n; ++t) {
      float* m = &mixed[t * lc];
      for (int64_t kh = 0; kh < nk; ++kh) {
        const float* src = qkvz.f32() + t * nk * group + kh * group;
        std::memcpy(m + kh * dk, src, static_cast<size_t>(dk) * 4);
        std::memcpy(m + nk * dk + kh * dk, src + dk, static_cast<size_t>(dk) * 4);
        std::memcpy(m + 2 * nk * dk + kh * r * dv, src + 2 * dk, static_cast<size_t>(r * dv) * 4);
        std::memcpy(&z[(t * nv + kh * r) * dv], src + 2 * dk + r * dv, static_cast<size_t>(r * dv) * 4);
        const float* bap = ba.f32() + t * nk * 2 * r + kh * 2 * r;
        for (int64_t j = 0; j < r; ++j) {
          b_raw[t * nv + kh * r + j] = bap[j];
          a_raw[t * nv + kh * r + j] = bap[r + j];
        }
      }
    }
  } else {
    const Tensor qkv = project(nm.in_proj_qkv, lc);
    const Tensor zt = project(nm.in_proj_z, nv * dv), bt = project(nm.in_proj_b, nv), at = project(nm.in_proj_a, nv);
    std::memcpy(mixed.data(), qkv.f32(), mixed.size() * 4);
    std::memcpy(z.data(), zt.f32(), z.size() * 4);
    std::memcpy(b_raw.data(), bt.f32(), b_raw.size() * 4);
    std::memcpy(a_raw.data(), at.f32(), a_raw.size() * 4);
  }
  std::vector<float> beta(static_cast<size_t>(n * nv)), g(static_cast<size_t>(n * nv));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t vh = 0; vh < nv; ++vh) {
      beta[t * nv + vh] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(b_raw[t * nv + vh]))));
      const double A = std::exp(static_cast<double>(a_log.f32()[vh]));
      g[t * nv + vh] =
          static_cast<float>(-A * softplus(static_cast<double>(a_raw[t * nv + vh]) + dt_bias.f32()[vh]));
    }

  std::vector<float> core(static_cast<size_t>(n * nv * dv));
  for (const SeqSegment& s : ctx.segments) {
    DZ_CHECK(s.conv_state && s.recurrent_state && s.state_pos, "linear-attention layer without a state cache");
    DZ_CHECK(s.pos0 == 0 || s.pos0 == *s.state_pos,
             "linear-attention state covers " << *s.state_pos << " positions, forward at " << s.pos0);
    const int64_t len = s.n_rows, r0 = s.row0;
    Tensor conv_state = Tensor::host(DType::kF32, {K - 1, lc});  // zero: a sequence starting at 0
    Tensor rec = Tensor::host(DType::kF32, {nv, dk, dv});
    if (s.pos0 > 0) {
      be.to_host(*s.conv_state, conv_state);
      be.to_host(*s.recurrent_state, rec);
    }
    // Window [K - 1 previous inputs | len new], conv (+ SiLU), new window = its last K - 1 rows.
    std::vector<float> win(static_cast<size_t>((K - 1 + len) * lc));
    std::memcpy(win.data(), conv_state.f32(), static_cast<size_t>((K - 1) * lc) * 4);
    std::memcpy(&win[(K - 1) * lc], &mixed[r0 * lc], static_cast<size_t>(len * lc) * 4);
    std::vector<float> conv_out(static_cast<size_t>(len * lc));
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < lc; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) acc += static_cast<double>(conv_w.f32()[c * K + j]) * win[(t + j) * lc + c];
        conv_out[t * lc + c] = static_cast<float>(silu(acc));
      }
    std::memcpy(conv_state.f32(), &win[len * lc], static_cast<size_t>((K - 1) * lc) * 4);
    // L2-normalised q and k per key head, repeated for the key head's r value heads.
    std::vector<float> qv(static_cast<size_t>(len * nv * dk)), kv(static_cast<size_t>(len * nv * dk)),
        vv(static_cast<size_t>(len * nv * dv));
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t kh = 0; kh < nk; ++kh) {
        for (int part = 0; part < 2; ++part) {
          const float* src = &conv_out[t * lc + part * nk * dk + kh * dk];
          double ss = 0;
          for (int64_t a = 0; a < dk; ++a) ss += static_cast<double>(src[a]) * src[a];
          const double inv = 1.0 / std::sqrt(ss + 1e-6);
          std::vector<float>& dst = part == 0 ? qv : kv;
          for (int64_t j = 0; j < r; ++j)
            for (int64_t a = 0; a < dk; ++a) dst[(t * nv + kh * r + j) * dk + a] = static_cast<float>(src[a] * inv);
        }
      }
      std::memcpy(&vv[t * nv * dv], &conv_out[t * lc + 2 * nk * dk], static_cast<size_t>(nv * dv) * 4);
    }
    float* o = &core[r0 * nv * dv];
    if (len == 1)
      delta_rule_recurrent(len, nv, dk, dv, qv.data(), kv.data(), vv.data(), &g[r0 * nv], &beta[r0 * nv], rec.f32(), o);
    else
      delta_rule_chunked(len, nv, dk, dv, qv.data(), kv.data(), vv.data(), &g[r0 * nv], &beta[r0 * nv], rec.f32(), o);
    be.copy(be.to_device(conv_state), *s.conv_state);
    be.copy(be.to_device(rec), *s.recurrent_state);
    *s.state_pos = s.pos0 + len;
  }

  // Gated RMSNorm per value head: w * rmsnorm(o) * silu(z).
  const double eps = hp.rms_eps;
  Tensor y = Tensor::host(DType::kF32, {n, nv * dv});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t vh = 0; vh < nv; ++vh) {
      const float* oh = &core[(t * nv + vh) * dv];
      const float* zh = &z[(t * nv + vh) * dv];
      float* yh = y.f32() + (t * nv + vh) * dv;
      double ss = 0;
      for (int64_t b = 0; b < dv; ++b) ss += static_cast<double>(oh[b]) * oh[b];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dv) + eps));
      for (int64_t b = 0; b < dv; ++b) yh[b] = norm_w.f32()[b] * (oh[b] * inv) * static_cast<float>(silu(zh[b]));
    }
  // Row-parallel out_proj over this rank's value heads, partial sums reduced.
  const Tensor& w_out = ctx.w.get(nm.out_proj);
  Tensor out = be.empty(DType::kF32, {n, w_out.dim(0)});
  be.matmul(be.to_device(y), w_out, out);
  ctx.reduce_tp(out);
  return out;
}

}  // namespace dayzero::model::blocks
