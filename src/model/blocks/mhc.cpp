// mHC (mhc.h): the hyper-connection weights, Sinkhorn-Knopp, the stream update and the hc_head
// collapse, plain loops in f32 on host arrays.
#include "model/blocks/mhc.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace dayzero::model::blocks {
namespace {

float mhc_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// m [rows] = fn [rows, hc d] . rmsnorm(x [hc d]) with no weight.
void mhc_mix_logits(const float* x, int64_t width, const float* fn, int64_t rows, float rms_eps, float* m) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / width) + rms_eps);
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = fn + r * width;
    float acc = 0;
    for (int64_t i = 0; i < width; ++i) acc += w[i] * (x[i] * inv);
    m[r] = acc;
  }
}

}  // namespace

void hyper_connection_pre(const HyperConnectionSizes& s, std::span<const float> streams, std::span<const float> fn,
                          std::span<const float> base, std::span<const float> scale, std::span<float> collapsed,
                          std::span<float> post, std::span<float> comb) {
  const int64_t n = s.n_tokens, hc = s.hc, d = s.d, mix = (2 + hc) * hc;
  DZ_CHECK(s.sinkhorn_iters >= 1, "hc_sinkhorn_iters " << s.sinkhorn_iters);
  DZ_CHECK(static_cast<int64_t>(streams.size()) == n * hc * d && static_cast<int64_t>(fn.size()) == mix * hc * d &&
               static_cast<int64_t>(base.size()) == mix && scale.size() == 3 &&
               static_cast<int64_t>(collapsed.size()) == n * d && static_cast<int64_t>(post.size()) == n * hc &&
               static_cast<int64_t>(comb.size()) == n * hc * hc,
           "hyper_connection_pre: sizes of " << n << " tokens x " << hc << " streams x " << d);
  std::vector<float> m(mix), c(hc * hc);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = streams.data() + t * hc * d;
    mhc_mix_logits(x, hc * d, fn.data(), mix, s.rms_eps, m.data());
    float* out = collapsed.data() + t * d;
    std::fill(out, out + d, 0.0f);
    for (int64_t j = 0; j < hc; ++j) {
      const float pre = mhc_sigmoid(m[j] * scale[0] + base[j]) + s.hc_eps;
      post[t * hc + j] = 2.0f * mhc_sigmoid(m[hc + j] * scale[1] + base[hc + j]);
      for (int64_t i = 0; i < d; ++i) out[i] += pre * x[j * d + i];
    }
    for (int64_t j = 0; j < hc; ++j) {  // softmax over each row, then the floor
      float* row = c.data() + j * hc;
      float mx = -INFINITY;
      for (int64_t k = 0; k < hc; ++k) {
        row[k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
        mx = std::max(mx, row[k]);
      }
      float sum = 0;
      for (int64_t k = 0; k < hc; ++k) sum += row[k] = std::exp(row[k] - mx);
      for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + s.hc_eps;
    }
    const auto normalize_columns = [&] {
      for (int64_t k = 0; k < hc; ++k) {
        float sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= sum + s.hc_eps;
      }
    };
    normalize_columns();
    for (int64_t it = 1; it < s.sinkhorn_iters; ++it) {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0;
        for (int64_t k = 0; k < hc; ++k) sum += c[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= sum + s.hc_eps;
      }
      normalize_columns();
    }
    std::copy(c.begin(), c.end(), comb.begin() + t * hc * hc);
  }
}

void hyper_connection_post(const HyperConnectionSizes& s, std::span<float> streams, std::span<const float> block_out,
                           std::span<const float> post, std::span<const float> comb) {
  const int64_t n = s.n_tokens, hc = s.hc, d = s.d;
  DZ_CHECK(static_cast<int64_t>(streams.size()) == n * hc * d && static_cast<int64_t>(block_out.size()) == n * d &&
               static_cast<int64_t>(post.size()) == n * hc && static_cast<int64_t>(comb.size()) == n * hc * hc,
           "hyper_connection_post: sizes of " << n << " tokens x " << hc << " streams x " << d);
  std::vector<float> mixed(hc * d);
  for (int64_t t = 0; t < n; ++t) {
    float* x = streams.data() + t * hc * d;
    const float* c = comb.data() + t * hc * hc;
    const float* y = block_out.data() + t * d;
    for (int64_t k = 0; k < hc; ++k)
      for (int64_t i = 0; i < d; ++i) {
        float acc = 0;
        for (int64_t j = 0; j < hc; ++j) acc += c[j * hc + k] * x[j * d + i];
        mixed[k * d + i] = post[t * hc + k] * y[i] + acc;
      }
    std::copy(mixed.begin(), mixed.end(), x);
  }
}

void hyper_head(const HyperConnectionSizes& s, std::span<const float> streams, std::span<const float> fn,
                std::span<const float> base, std::span<const float> scale, std::span<float> out) {
  const int64_t n = s.n_tokens, hc = s.hc, d = s.d;
  DZ_CHECK(static_cast<int64_t>(streams.size()) == n * hc * d && static_cast<int64_t>(fn.size()) == hc * hc * d &&
               static_cast<int64_t>(base.size()) == hc && scale.size() == 1 &&
               static_cast<int64_t>(out.size()) == n * d,
           "hyper_head: sizes of " << n << " tokens x " << hc << " streams x " << d);
  std::vector<float> m(hc);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = streams.data() + t * hc * d;
    mhc_mix_logits(x, hc * d, fn.data(), hc, s.rms_eps, m.data());
    float* o = out.data() + t * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t j = 0; j < hc; ++j) {
      const float pre = mhc_sigmoid(m[j] * scale[0] + base[j]) + s.hc_eps;
      for (int64_t i = 0; i < d; ++i) o[i] += pre * x[j * d + i];
    }
  }
}

}  // namespace dayzero::model::blocks
