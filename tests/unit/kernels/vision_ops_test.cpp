// The vision ops of ops.h against plain-loop f64 twins, one case each with its tolerance
// beside it: layernorm (with and without bias), the three GELUs, bidirectional attention
// (GQA grouping, every token sees every token).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::random_vector;

TEST(VisionOps, LayerNorm) {
  const int64_t rows = 3, width = 37;
  const float eps = 1e-5f;
  const uint32_t seed = 11;
  // An offset mean: the two-pass variance must not cancel.
  const auto x = random_vector(rows * width, seed, 2, 5), w = random_vector(width, seed + 1, 0.5f, 1.5f),
             b = random_vector(width, seed + 2);
  for (bool with_bias : {true, false}) {
    std::vector<float> got(rows * width), want(rows * width);
    cpu::layernorm(rows, width, x.data(), w.data(), with_bias ? b.data() : nullptr, eps, got.data());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < width; ++i) mean += x[r * width + i];
      mean /= width;
      for (int64_t i = 0; i < width; ++i) var += (x[r * width + i] - mean) * (x[r * width + i] - mean);
      var /= width;
      for (int64_t i = 0; i < width; ++i)
        want[r * width + i] =
            static_cast<float>((x[r * width + i] - mean) / std::sqrt(var + eps) * w[i] + (with_bias ? b[i] : 0.0));
    }
    EXPECT_TRUE(close(with_bias ? "layernorm+bias" : "layernorm", got, want, {rows, width}, 1e-6, seed));  // f32 rounding of one product
  }
}

TEST(VisionOps, Gelu) {
  const int64_t n = 1001;
  const uint32_t seed = 12;
  const auto x = random_vector(n, seed, -6, 6);
  const double pi = std::acos(-1.0);
  auto twin = [&](cpu::GeluKind k, double v) {
    switch (k) {
      case cpu::GeluKind::kErf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      case cpu::GeluKind::kTanh: return 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v)));
      case cpu::GeluKind::kQuick: return v / (1 + std::exp(-1.702 * v));
    }
    return 0.0;
  };
  for (auto k : {cpu::GeluKind::kErf, cpu::GeluKind::kTanh, cpu::GeluKind::kQuick}) {
    std::vector<float> got(n), want(n);
    cpu::gelu(n, k, x.data(), got.data());
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(twin(k, x[i]));
    EXPECT_TRUE(close("gelu", got, want, {n}, 1e-6, seed)) << static_cast<int>(k);  // f32 erf/tanh/exp
    // The three differ by more than the tolerance: the case tells them apart.
    if (k != cpu::GeluKind::kErf) {
      std::vector<float> erf(n);
      cpu::gelu(n, cpu::GeluKind::kErf, x.data(), erf.data());
      EXPECT_FALSE(close("gelu vs erf (expected to differ)", got, erf, {n}, 1e-6, seed));
    }
  }
}

TEST(VisionOps, AttentionFull) {
  const int64_t n = 7, n_head = 4, n_kv = 2, hd = 8;
  const uint32_t seed = 13;
  const float scale = 1.0f / std::sqrt(float(hd));
  const auto q = random_vector(n * n_head * hd, seed, -2, 2), k = random_vector(n * n_kv * hd, seed + 1, -2, 2),
             v = random_vector(n * n_kv * hd, seed + 2);
  std::vector<float> got(q.size()), want(q.size());
  cpu::attention_full(n, n_head, n_kv, hd, q.data(), k.data(), v.data(), scale, got.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / (n_head / n_kv);
      std::vector<double> p(n);
      double mx = -1e300, sum = 0;
      for (int64_t s = 0; s < n; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(q[(t * n_head + h) * hd + d]) * k[(s * n_kv + hk) * hd + d];
        p[s] = dot * scale;
        mx = std::max(mx, p[s]);
      }
      for (auto& e : p) sum += (e = std::exp(e - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t s = 0; s < n; ++s) o += p[s] / sum * v[(s * n_kv + hk) * hd + d];
        want[(t * n_head + h) * hd + d] = static_cast<float>(o);
      }
    }
  EXPECT_TRUE(close("attention_full", got, want, {n, n_head, hd}, 1e-6, seed));  // f32 softmax over 7 keys
}

}  // namespace
}  // namespace dayzero::kernels
