// DeepSeek-V4's attention core (v4_attention.h), plain loops on host arrays.
#include "model/blocks/v4_attention.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/blocks/row_linear.h"

namespace dayzero::model::blocks {
namespace {

// Interleaved pairs of the trailing rope_dim channels of v [width] at pos (sign -1: conjugate).
void attn_rotate(float* v, int64_t width, int64_t rope_dim, const float* inv_freq, int64_t pos, float sign) {
  float* r = v + width - rope_dim;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const float a = static_cast<float>(pos) * inv_freq[i], cs = std::cos(a), sn = sign * std::sin(a);
    const float x0 = r[2 * i], x1 = r[2 * i + 1];
    r[2 * i] = x0 * cs - x1 * sn;
    r[2 * i + 1] = x1 * cs + x0 * sn;
  }
}

}  // namespace

void v4_rmsnorm(float* x, int64_t width, const float* w, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / width) + eps);
  for (int64_t i = 0; i < width; ++i) x[i] = (w ? w[i] : 1.0f) * (x[i] * inv);
}

void v4_attention(const V4AttentionSizes& s, V4WindowCache& cache, std::span<const float> x, int64_t n,
                  std::span<const float> wq_a, std::span<const float> q_norm, std::span<const float> wq_b,
                  std::span<const float> wkv, std::span<const float> kv_norm, std::span<const float> sinks,
                  std::span<const float> wo_a, std::span<const float> wo_b, std::span<const float> inv_freq,
                  const V4Compressed& cmp, std::span<float> out) {
  const int64_t H = s.n_head, hd = s.head_dim, G = s.o_groups, per_group = H * hd / G;
  DZ_CHECK(static_cast<int64_t>(x.size()) == n * s.d && static_cast<int64_t>(wq_a.size()) == s.q_lora * s.d &&
               static_cast<int64_t>(wq_b.size()) == H * hd * s.q_lora && static_cast<int64_t>(wkv.size()) == hd * s.d &&
               static_cast<int64_t>(sinks.size()) == H && static_cast<int64_t>(wo_a.size()) == G * s.o_lora * per_group &&
               static_cast<int64_t>(wo_b.size()) == s.d * G * s.o_lora && static_cast<int64_t>(out.size()) == n * s.d &&
               static_cast<int64_t>(inv_freq.size()) * 2 == s.rope_dim && (H * hd) % G == 0,
           "v4_attention: sizes of " << n << " rows x " << s.d);
  const int64_t pos0 = cache.end, kept = static_cast<int64_t>(cache.kv.size()) / hd;
  // The shared K=V entries of this call's rows, after the kept ones: keys [kept + n, hd].
  std::vector<float> keys(cache.kv);
  keys.resize((kept + n) * hd);
  float* kv = keys.data() + kept * hd;
  row_linear(x.data(), n, s.d, wkv.data(), hd, kv);
  for (int64_t r = 0; r < n; ++r) {
    v4_rmsnorm(kv + r * hd, hd, kv_norm.data(), s.rms_eps);
    attn_rotate(kv + r * hd, hd, s.rope_dim, inv_freq.data(), pos0 + r, 1.0f);
  }
  // Queries: q LoRA, each head normalised without a weight, rotated.
  std::vector<float> qa(n * s.q_lora), q(n * H * hd);
  row_linear(x.data(), n, s.d, wq_a.data(), s.q_lora, qa.data());
  for (int64_t r = 0; r < n; ++r) v4_rmsnorm(qa.data() + r * s.q_lora, s.q_lora, q_norm.data(), s.rms_eps);
  row_linear(qa.data(), n, s.q_lora, wq_b.data(), H * hd, q.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q.data() + (r * H + h) * hd;
      v4_rmsnorm(qh, hd, nullptr, s.rms_eps);
      attn_rotate(qh, hd, s.rope_dim, inv_freq.data(), pos0 + r, 1.0f);
    }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> o(n * H * hd, 0.0f);
  std::vector<const float*> seen;
  std::vector<float> logit;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p = pos0 + r;
    seen.clear();
    for (int64_t k = std::max<int64_t>(0, p - s.window + 1); k <= p; ++k) seen.push_back(keys.data() + (k - (pos0 - kept)) * hd);
    if (cmp.n_entries > 0) {
      if (cmp.picks.empty()) {
        const int64_t visible = std::min(cmp.n_entries, (p + 1) / cmp.rate);
        for (int64_t t = 0; t < visible; ++t) seen.push_back(cmp.entries.data() + t * hd);
      } else {
        for (int64_t j = 0; j < cmp.topk; ++j) {
          const int32_t t = cmp.picks[r * cmp.topk + j];
          if (t >= 0) seen.push_back(cmp.entries.data() + t * hd);
        }
      }
    }
    logit.resize(seen.size());
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (r * H + h) * hd;
      float mx = sinks[h];
      for (size_t k = 0; k < seen.size(); ++k) {
        float dot = 0;
        for (int64_t c = 0; c < hd; ++c) dot += qh[c] * seen[k][c];
        logit[k] = dot * scale;
        mx = std::max(mx, logit[k]);
      }
      float sum = std::exp(sinks[h] - mx);
      for (auto& l : logit) sum += l = std::exp(l - mx);
      float* oh = o.data() + (r * H + h) * hd;
      for (size_t k = 0; k < seen.size(); ++k)
        for (int64_t c = 0; c < hd; ++c) oh[c] += logit[k] / sum * seen[k][c];
      attn_rotate(oh, hd, s.rope_dim, inv_freq.data(), p, -1.0f);
    }
  }
  // Grouped output projection: group g's heads through wo_a's rows of g, then wo_b.
  std::vector<float> mid(n * G * s.o_lora);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g)
      row_linear(o.data() + r * H * hd + g * per_group, 1, per_group, wo_a.data() + g * s.o_lora * per_group, s.o_lora,
             mid.data() + (r * G + g) * s.o_lora);
  row_linear(mid.data(), n, G * s.o_lora, wo_b.data(), s.d, out.data());
  // Keep the last window - 1 entries for the next call.
  const int64_t total = kept + n, keep = std::min<int64_t>(total, s.window - 1);
  cache.kv.assign(keys.begin() + (total - keep) * hd, keys.begin() + total * hd);
  cache.end = pos0 + n;
}

}  // namespace dayzero::model::blocks
