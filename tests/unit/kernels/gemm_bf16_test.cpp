// matmul_nt_bf16: a bf16 weight as stored, widened inside the GEMM. Where matmul_nt takes the
// built-in small-M kernel (m <= 16) the result must carry its bits on the weight widened to f32
// (the widening is exact); above, the panels take the large-M path, checked against the
// double-precision twin. Negative controls: one weight moved by one bf16 ulp breaks the bitwise
// check, and an x scaled by 1 + 1e-4 breaks the tolerance. Also matmul_nt_shared_x, whose
// products must each have the bits of their own matmul_nt / matmul_nt_bf16 call.
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

using test::matmul_nt_twin;

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
          const auto ref = matmul_nt_twin(m, n, k, x, widened(w), got, acc);
          cpu::matmul_nt_bf16(m, n, k, x.data(), w.data(), got.data(), acc);
          cpu::matmul_nt(m, n, k, x.data(), widened(w).data(), f32.data(), acc);
          worst = std::max(worst, test::rel_l2(got, ref));
          worst_f32 = std::max(worst_f32, test::rel_l2(f32, ref));
          ASSERT_TRUE(close(label(m, n, k, acc), got, ref, {m, n}, kLargeMTolerance, seed));
    }
  std::printf("largest relative L2 error against the twin: %.3g (matmul_nt on the widened weight: %.3g)\n", worst,
              worst_f32);
}

// Several products of one x in one call (q, k, v; gate, up), f32 and bf16 weights mixed, n with
// edge tiles and a product of one row: each has the bits of its own call, at every m (the
// small-M kernel's one parallel loop, and m = 17 where each product takes its own call).
TEST(GemmSharedX, EachProductHasTheBitsOfItsOwnCall) {
  uint32_t seed = 1300;
  for (int64_t m : {1, 2, 5, 16, 17})
    for (int64_t k : {15, 600})
      for (bool acc : {false, true}) {
        const std::vector<int64_t> ns = {130, 1, 7, 64};
        std::vector<std::vector<float>> wf(ns.size()), got(ns.size()), want(ns.size());
        std::vector<std::vector<uint16_t>> wb(ns.size());
        std::vector<cpu::NtProduct> products;
        const auto x = random_vector(m * k, ++seed);
        for (size_t i = 0; i < ns.size(); ++i) {
          const bool bf16 = i % 2 == 1;
          wf[i] = random_vector(ns[i] * k, ++seed);
          if (bf16) wb[i] = to_bf16(wf[i]);
          got[i] = want[i] = random_vector(m * ns[i], ++seed);
          if (bf16) cpu::matmul_nt_bf16(m, ns[i], k, x.data(), wb[i].data(), want[i].data(), acc);
          else cpu::matmul_nt(m, ns[i], k, x.data(), wf[i].data(), want[i].data(), acc);
          products.push_back({ns[i], bf16 ? static_cast<const void*>(wb[i].data()) : wf[i].data(),
                              bf16 ? cpu::WeightKind::kBF16 : cpu::WeightKind::kF32, got[i].data()});
        }
        cpu::matmul_nt_shared_x(m, k, x.data(), products.data(), static_cast<int>(products.size()), acc);
        for (size_t i = 0; i < ns.size(); ++i)
          ASSERT_TRUE(identical(label(m, ns[i], k, acc) + " product " + std::to_string(i), got[i], want[i], {m, ns[i]}));
      }
}

// Negative control: the products handed over in another order than their outputs (k's weight
// written to q's output) is caught by the same comparison.
TEST(GemmSharedX, NegativeControl) {
  const int64_t m = 1, k = 64;
  const auto x = random_vector(m * k, 41);
  const auto w0 = random_vector(8 * k, 42), w1 = random_vector(8 * k, 43);
  std::vector<float> y0(8), y1(8), want0(8);
  cpu::matmul_nt(m, 8, k, x.data(), w0.data(), want0.data());
  const cpu::NtProduct swapped[] = {{8, w1.data(), cpu::WeightKind::kF32, y0.data()},
                                      {8, w0.data(), cpu::WeightKind::kF32, y1.data()}};
  cpu::matmul_nt_shared_x(m, k, x.data(), swapped, 2);
  EXPECT_FALSE(identical("outputs swapped", y0, want0, {m, 8}));
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
  const auto ref = matmul_nt_twin(mm, nn, kk, xx, widened(ww), y, true);
  for (float& v : xx) v *= 1.0f + 1e-4f;
  cpu::matmul_nt_bf16(mm, nn, kk, xx.data(), ww.data(), y.data(), true);
  EXPECT_FALSE(close("x scaled by 1 + 1e-4", y, ref, {mm, nn}, kLargeMTolerance, 7));
}

}  // namespace
}  // namespace dayzero::kernels
