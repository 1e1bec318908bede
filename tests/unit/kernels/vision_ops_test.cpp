// The vision ops of ops.h against plain-loop f64 twins, one case each with its tolerance
// beside it: layernorm (with and without bias), the three GELUs (vectorised tanh and quick
// forms, a length with a tail), bidirectional attention (GQA grouping, every token sees every
// token; the GEMM-tiled kernel at tower-like head sizes, with negative controls and thread-count
// independence) and the serial "nn" GEMM kernel behind it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vision_ops.h"
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

// out[t, h, :] = softmax_s(scale * q[t, h] · k[s, h / group]) v[s, h / group] over every s, in double.
std::vector<float> attention_twin(int64_t n, int64_t n_head, int64_t n_kv, int64_t hd, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v, float scale) {
  std::vector<float> want(q.size());
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
  return want;
}

std::vector<float> attention(int64_t n, int64_t n_head, int64_t n_kv, int64_t hd, const std::vector<float>& q,
                             const std::vector<float>& k, const std::vector<float>& v, float scale) {
  std::vector<float> got(q.size());
  cpu::attention_full(n, n_head, n_kv, hd, q.data(), k.data(), v.data(), scale, got.data());
  return got;
}

TEST(VisionOps, AttentionFull) {
  const int64_t n = 7, n_head = 4, n_kv = 2, hd = 8;
  const uint32_t seed = 13;
  const float scale = 1.0f / std::sqrt(float(hd));
  const auto q = random_vector(n * n_head * hd, seed, -2, 2), k = random_vector(n * n_kv * hd, seed + 1, -2, 2),
             v = random_vector(n * n_kv * hd, seed + 2);
  EXPECT_TRUE(close("attention_full", attention(n, n_head, n_kv, hd, q, k, v, scale),
                    attention_twin(n, n_head, n_kv, hd, q, k, v, scale), {n, n_head, hd}, 1e-6, seed));  // f32 softmax over 7 keys
}

// The GEMM-tiled kernel on shapes of real towers and their edges: MoonViT's head_dim 72 and
// CLIP's 64 (and an odd 20), token counts that are not a multiple of the SIMD width, several
// query tiles (64 rows each), GQA groups. Worst relative L2 measured against the double twin:
// 4.4e-7 (f32 sums of up to 150 terms in order); tolerance 6e-7. Negative control: a scale 1.001 times too large (the softmax
// sharpens) exceeds it in every case.
TEST(VisionOps, AttentionFullTiledMatchesTwin) {
  struct Case {
    const char* label;
    int64_t n, n_head, n_kv, hd;
  };
  const Case cases[] = {
      {"moonvit head_dim 72, 3 tiles", 150, 2, 2, 72},
      {"clip head_dim 64, 1 token past a tile", 65, 3, 3, 64},
      {"gqa 2, odd head_dim", 37, 4, 2, 20},
      {"one token", 1, 2, 1, 72},
  };
  constexpr double kTol = 6e-7;
  uint32_t seed = 300;
  double worst = 0;
  for (const Case& c : cases) {
    seed += 3;
    const float scale = 1.0f / std::sqrt(float(c.hd));
    const auto q = random_vector(c.n * c.n_head * c.hd, seed, -2, 2),
               k = random_vector(c.n * c.n_kv * c.hd, seed + 1, -2, 2), v = random_vector(c.n * c.n_kv * c.hd, seed + 2);
    const auto want = attention_twin(c.n, c.n_head, c.n_kv, c.hd, q, k, v, scale);
    const auto got = attention(c.n, c.n_head, c.n_kv, c.hd, q, k, v, scale);
    EXPECT_TRUE(close(c.label, got, want, {c.n, c.n_head, c.hd}, kTol, seed));
    worst = std::max(worst, test::rel_l2(got, want));
    if (c.n > 1) {
      EXPECT_GT(test::rel_l2(attention(c.n, c.n_head, c.n_kv, c.hd, q, k, v, scale * 1.001f), want), kTol)
          << c.label << ": scale x1.001";
    }
  }
  std::printf("[ measured ] attention_full worst relative L2 %.3g (tolerance %.3g)\n", worst, kTol);
}

// Work items (kv head, query tile) are independent, so 1 and 2 threads give the same bits.
TEST(VisionOps, AttentionFullThreadsDoNotMatter) {
  const int64_t n = 130, n_head = 4, n_kv = 2, hd = 72;
  const auto q = random_vector(n * n_head * hd, 41, -2, 2), k = random_vector(n * n_kv * hd, 42, -2, 2),
             v = random_vector(n * n_kv * hd, 43);
  cpu::set_kernel_threads(1);
  const auto one = attention(n, n_head, n_kv, hd, q, k, v, 0.1f);
  cpu::set_kernel_threads(2);
  const auto two = attention(n, n_head, n_kv, hd, q, k, v, 0.1f);
  cpu::set_kernel_threads(1);
  EXPECT_TRUE(test::identical("attention_full 1 vs 2 threads", one, two, {n, n_head, hd}));
}

// C = A · B (+ C) with padded leading dimensions, k across the kernel's k blocks (256), m and n
// not multiples of its register tile; against a double twin. Worst relative L2 measured 3.1e-7
// (one f32 FMA chain of 300 terms per element); tolerance 4e-7. Negative control: one term of k left out exceeds it. Padding columns of C
// past n are never written.
TEST(VisionOps, MatmulNnMatchesTwin) {
  const int64_t lanes = cpu::matmul_nn_lanes();
  const int64_t m = 7, n = 7 * lanes, k = 300, lda = k + 3, ldb = n + lanes, ldc = n + 5;
  const auto a = random_vector(m * lda, 51), b = random_vector(k * ldb, 52), c0 = random_vector(m * ldc, 53);
  constexpr double kTol = 4e-7;
  auto twin = [&](int64_t kk, bool acc) {
    std::vector<float> want(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = acc ? c0[i * ldc + j] : 0.0;
        for (int64_t p = 0; p < kk; ++p) s += double(a[i * lda + p]) * b[p * ldb + j];
        want[i * n + j] = static_cast<float>(s);
      }
    return want;
  };
  for (bool acc : {false, true}) {
    std::vector<float> c = c0;
    cpu::matmul_nn_serial(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc);
    std::vector<float> got(m * n);
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(c.begin() + i * ldc, n, got.begin() + i * n);
      for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "padding written at " << i << ", " << j;
    }
    EXPECT_TRUE(close(acc ? "matmul_nn accumulate" : "matmul_nn", got, twin(k, acc), {m, n}, kTol, 51));
    EXPECT_GT(test::rel_l2(got, twin(k - 1, acc)), kTol) << "k - 1 terms";
    std::printf("[ measured ] matmul_nn%s relative L2 %.3g (tolerance %.3g)\n", acc ? " accumulate" : "",
                test::rel_l2(got, twin(k, acc)), kTol);
  }
}

}  // namespace
}  // namespace dayzero::kernels
