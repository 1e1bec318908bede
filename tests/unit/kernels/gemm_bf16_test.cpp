// matmul_nt_bf16: a bf16 weight as stored, widened inside the GEMM. Where matmul_nt takes the
// built-in small-M kernel (m <= 16) the result must carry its bits on the weight widened to f32
// (the widening is exact); above, the panels take the large-M path, checked against the
// double-precision twin. Negative controls: one weight moved by one bf16 ulp breaks the bitwise
// check, and an x scaled by 1 + 1e-4 breaks the tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::identical;
using test::random_vector;

std::vector<uint16_t> to_bf16(const std::vector<float>& w) {
  std::vector<uint16_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = f32_to_bf16(w[i]);
  return out;
}
std::vector<float> widened(const std::vector<uint16_t>& w) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = bf16_to_f32(w[i]);
  return out;
}

std::vector<float> twin(int64_t m, int64_t n, int64_t k, const std::vector<float>& x, const std::vector<float>& w,
                        std::vector<float> y, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? y[i * n + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * w[j * k + p];
      y[i * n + j] = static_cast<float>(s);
    }
  return y;
}

constexpr double kLargeMTolerance = 4e-7;

std::string label(int64_t m, int64_t n, int64_t k, bool acc) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (acc ? " accumulate" : "");
}

// Decode shapes: every m of the small-M kernel, n and k with edges and scalar tails.
TEST(GemmBf16, SmallMHasTheBitsOfTheWidenedF32Weight) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  uint32_t seed = 500;
  for (int64_t m : {1, 2, 3, 5, 8, 16})
    for (int64_t n : {1, 7, 130})
      for (int64_t k : {1, 15, 600, 1537})
        for (bool acc : {false, true}) {
          ++seed;
          const auto x = random_vector(m * k, seed);
          const auto w = to_bf16(random_vector(n * k, seed + 7));
          const auto wf = widened(w);
          auto got = random_vector(m * n, seed + 13), want = got;
          cpu::matmul_nt_bf16(m, n, k, x.data(), w.data(), got.data(), acc);
          cpu::matmul_nt(m, n, k, x.data(), wf.data(), want.data(), acc);
          ASSERT_TRUE(identical(label(m, n, k, acc), got, want, {m, n}));
        }
}

// Above m = 16 the panels' products are the large-M path's on fewer columns, which a BLAS may
// sum in another order (OpenBLAS does at n = 700), so the check is the twin's tolerance, just
// above the largest relative L2 error measured (2.9e-7 and 3.1e-7 in two runs at m 17..130, k up
// to 4100, as for matmul_nt on the widened weight).
TEST(GemmBf16, LargeMMatchesTheTwin) {
  uint32_t seed = 900;
  double worst = 0, worst_f32 = 0;
  struct Shape {
    int64_t m, n, k;
  };
  // k 4100 at n 700: panels of fewer rows than n.
  for (const auto [m, n, k] : {Shape{17, 33, 15}, Shape{17, 700, 4100}, Shape{64, 33, 1000}, Shape{64, 700, 1000},
                               Shape{130, 33, 4100}, Shape{130, 700, 15}})
    for (bool acc : {false, true}) {
          ++seed;
          const auto x = random_vector(m * k, seed);
          const auto w = to_bf16(random_vector(n * k, seed + 7));
          auto got = random_vector(m * n, seed + 13), f32 = got;
          const auto ref = twin(m, n, k, x, widened(w), got, acc);
          cpu::matmul_nt_bf16(m, n, k, x.data(), w.data(), got.data(), acc);
          cpu::matmul_nt(m, n, k, x.data(), widened(w).data(), f32.data(), acc);
          worst = std::max(worst, test::rel_l2(got, ref));
          worst_f32 = std::max(worst_f32, test::rel_l2(f32, ref));
          ASSERT_TRUE(close(label(m, n, k, acc), got, ref, {m, n}, kLargeMTolerance, seed));
    }
  std::printf("largest relative L2 error against the twin: %.3g (matmul_nt on the widened weight: %.3g)\n", worst,
              worst_f32);
}

TEST(GemmBf16, NegativeControls) {
  const int64_t m = 1, n = 64, k = 512;
  const auto x = random_vector(m * k, 3);
  auto w = to_bf16(random_vector(n * k, 4));
  std::vector<float> want(m * n), got(m * n);
  cpu::matmul_nt(m, n, k, x.data(), widened(w).data(), want.data());
  w[5 * k + 17] ^= 1;  // one weight one bf16 ulp away
  cpu::matmul_nt_bf16(m, n, k, x.data(), w.data(), got.data());
  EXPECT_FALSE(identical("one weight moved", got, want, {m, n}));

  const int64_t mm = 64, nn = 33, kk = 1000;
  auto xx = random_vector(mm * kk, 5);
  const auto ww = to_bf16(random_vector(nn * kk, 6));
  auto y = random_vector(mm * nn, 7);
  const auto ref = twin(mm, nn, kk, xx, widened(ww), y, true);
  for (float& v : xx) v *= 1.0f + 1e-4f;
  cpu::matmul_nt_bf16(mm, nn, kk, xx.data(), ww.data(), y.data(), true);
  EXPECT_FALSE(close("x scaled by 1 + 1e-4", y, ref, {mm, nn}, kLargeMTolerance, 7));
}

}  // namespace
}  // namespace dayzero::kernels
