// matmul_nt_fp8: a block-scaled FP8 weight as stored, converted inside the GEMM. Where matmul_nt
// takes the built-in small-M kernel (m <= 16) the result must carry its bits on the weight
// dequantised as the loader does it (f32(byte) * scale, one rounding), here by a decoder of its
// own (ldexp of the fields); above, the dequantised panels take the large-M path, checked against
// the double-precision twin. Slices that start inside a block, blocks narrower than a vector and
// both formats reach every scale lookup. Negative controls: one byte flipped, and the scale of
// the neighbouring block, each break the bitwise check. matmul_nt_shared_x with FP8 products
// mixed in: each has the bits of its own call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::identical;
using test::random_vector;

// The value of an FP8 byte from its fields: E4M3 (bias 7, no infinities) or E5M2 (bias 15).
float fp8_value(uint8_t b, bool e5m2) {
  const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const int e = (b & 0x7f) >> mbits, m = b & ((1 << mbits) - 1);
  const double mag = e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp((1 << mbits) + m, e - bias - mbits);
  return static_cast<float>((b & 0x80) ? -mag : mag);
}

bool finite_fp8(uint8_t b, bool e5m2) { return e5m2 ? (b & 0x7c) != 0x7c : (b & 0x7f) != 0x7f; }

// One FP8 slice [n, k] at (row0, col0) of a weight in blocks of br x bc, with the scales that
// cover it, and its dequantised f32 form.
struct Fp8Case {
  int64_t n, k, row0, col0, br, bc;
  bool e5m2;
  std::vector<uint8_t> q;
  std::vector<float> scale;
  int64_t scale_cols = 0;

  Fp8Case(int64_t n_, int64_t k_, int64_t row0_, int64_t col0_, int64_t br_, int64_t bc_, bool e5m2_, uint32_t seed)
      : n(n_), k(k_), row0(row0_), col0(col0_), br(br_), bc(bc_), e5m2(e5m2_) {
    q.resize(static_cast<size_t>(n * k));
    for (auto& b : q) {
      do {
        seed = seed * 1664525u + 1013904223u;
        b = static_cast<uint8_t>(seed >> 24);
      } while (!finite_fp8(b, e5m2));
    }
    const int64_t scale_rows = (row0 + n - 1) / br + 1 - row0 / br;
    scale_cols = (col0 + k - 1) / bc + 1 - col0 / bc;
    // Scales with full mantissas (products round), a few tiny, some above 1.
    scale = random_vector(static_cast<size_t>(scale_rows * scale_cols), seed, 1e-4f, 3.0f);
    if (scale.size() > 1) scale[1] = 3e-39f;  // subnormal: products round into subnormals
  }
  cpu::Fp8Weight weight() const {
    cpu::Fp8Weight w;
    w.q = q.data();
    w.scale = scale.data();
    w.scale_cols = scale_cols;
    w.row0 = row0;
    w.col0 = col0;
    w.block_rows = br;
    w.block_cols = bc;
    w.e5m2 = e5m2;
    return w;
  }
  std::vector<float> dequantised() const {
    std::vector<float> out(q.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const float s = scale[((row0 + i) / br - row0 / br) * scale_cols + (col0 + j) / bc - col0 / bc];
        out[i * k + j] = fp8_value(q[i * k + j], e5m2) * s;
      }
    return out;
  }
  std::string label() const {
    return "fp8 " + std::string(e5m2 ? "e5m2 " : "e4m3 ") + std::to_string(n) + "x" + std::to_string(k) + " at (" +
           std::to_string(row0) + ", " + std::to_string(col0) + ") blocks " + std::to_string(br) + "x" +
           std::to_string(bc);
  }
};

struct Layout {
  int64_t row0, col0, br, bc;
  bool e5m2;
};
// Whole weights in 128 x 128 blocks; a slice inside a block (columns not a multiple of the
// vector: steps straddle two blocks); blocks narrower than a vector; E5M2.
const Layout kLayouts[] = {{0, 0, 128, 128, false}, {70, 45, 128, 128, false}, {3, 2, 5, 3, false}, {0, 0, 16, 24, true}};

std::string label(const Fp8Case& c, int64_t m, bool acc, int threads) {
  return c.label() + " m=" + std::to_string(m) + (acc ? " accumulate" : "") + " threads=" + std::to_string(threads);
}

TEST(GemmFp8, DequantiseRowsHasTheLoadersBits) {
  uint32_t seed = 10;
  for (const Layout& l : kLayouts)
    for (int64_t k : {1, 15, 600}) {
      const Fp8Case c(37, k, l.row0, l.col0, l.br, l.bc, l.e5m2, ++seed);
      const auto want = c.dequantised();
      std::vector<float> got(want.size());
      cpu::dequantise_fp8_rows(c.weight(), k, 0, c.n, got.data());
      ASSERT_TRUE(identical(c.label(), got, want, {c.n, k}));
      std::vector<float> part(static_cast<size_t>(5 * k));
      cpu::dequantise_fp8_rows(c.weight(), k, 30, 5, part.data());
      ASSERT_TRUE(identical(c.label() + " rows 30..35", part,
                            std::vector<float>(want.begin() + 30 * k, want.begin() + 35 * k), {5, k}));
    }
}

// Decode shapes: m of the small-M kernel, n and k with edges and scalar tails, one and two threads.
TEST(GemmFp8, SmallMHasTheBitsOfTheDequantisedWeight) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  const int threads0 = cpu::gemm_info().threads;
  uint32_t seed = 500;
  for (int threads : {1, 2}) {
    cpu::gemm_set_threads(threads);
    for (const Layout& l : kLayouts)
      for (int64_t m : {1, 2, 5, 16})
        for (int64_t n : {1, 7, 130})
          for (int64_t k : {1, 15, 600, 1537})
            for (bool acc : {false, true}) {
              ++seed;
              const Fp8Case c(n, k, l.row0, l.col0, l.br, l.bc, l.e5m2, seed);
              const auto x = random_vector(m * k, seed + 3);
              auto got = random_vector(m * n, seed + 5), want = got;
              cpu::matmul_nt_fp8(m, n, k, x.data(), c.weight(), got.data(), acc);
              cpu::matmul_nt(m, n, k, x.data(), c.dequantised().data(), want.data(), acc);
              ASSERT_TRUE(identical(label(c, m, acc, threads), got, want, {m, n}));
            }
  }
  cpu::gemm_set_threads(threads0);
}

// Above m = 16: the dequantised panels through the large-M path, against the twin (the
// tolerance of gemm_bf16_test, whose panels are the same code).
TEST(GemmFp8, LargeMMatchesTheTwin) {
  uint32_t seed = 900;
  struct Shape {
    int64_t m, n, k;
  };
  for (const auto [m, n, k] : {Shape{17, 33, 15}, Shape{17, 700, 4100}, Shape{64, 130, 600}})
    for (const Layout& l : kLayouts)
      for (bool acc : {false, true}) {
        ++seed;
        const Fp8Case c(n, k, l.row0, l.col0, l.br, l.bc, l.e5m2, seed);
        const auto x = random_vector(m * k, seed + 3);
        auto got = random_vector(m * n, seed + 5);
        const auto ref = test::matmul_nt_twin(m, n, k, x, c.dequantised(), got, acc);
        cpu::matmul_nt_fp8(m, n, k, x.data(), c.weight(), got.data(), acc);
        ASSERT_TRUE(close(label(c, m, acc, cpu::gemm_info().threads), got, ref, {m, n}, 4e-7, seed));
      }
}

// FP8, bf16 and f32 products of one x in one call: each has the bits of its own call.
TEST(GemmSharedX, Fp8ProductsHaveTheBitsOfTheirOwnCall) {
  uint32_t seed = 1300;
  for (int64_t m : {1, 3, 16, 17})
    for (int64_t k : {15, 600})
      for (bool acc : {false, true}) {
        const std::vector<int64_t> ns = {130, 7, 64};
        const auto x = random_vector(m * k, ++seed);
        const Fp8Case a(ns[0], k, 70, 45, 128, 128, false, ++seed), b(ns[2], k, 0, 0, 16, 24, true, ++seed);
        const cpu::Fp8Weight wa = a.weight(), wb = b.weight();
        const auto wf = random_vector(ns[1] * k, ++seed);
        std::vector<std::vector<float>> got(3), want(3);
        for (size_t i = 0; i < 3; ++i) got[i] = want[i] = random_vector(m * ns[i], ++seed);
        cpu::matmul_nt_fp8(m, ns[0], k, x.data(), wa, want[0].data(), acc);
        cpu::matmul_nt(m, ns[1], k, x.data(), wf.data(), want[1].data(), acc);
        cpu::matmul_nt_fp8(m, ns[2], k, x.data(), wb, want[2].data(), acc);
        const cpu::NtProduct products[] = {{ns[0], &wa, cpu::WeightKind::kFp8, got[0].data()},
                                           {ns[1], wf.data(), cpu::WeightKind::kF32, got[1].data()},
                                           {ns[2], &wb, cpu::WeightKind::kFp8, got[2].data()}};
        cpu::matmul_nt_shared_x(m, k, x.data(), products, 3, acc);
        for (size_t i = 0; i < 3; ++i)
          ASSERT_TRUE(identical("m=" + std::to_string(m) + " k=" + std::to_string(k) + " product " + std::to_string(i),
                                got[i], want[i], {m, ns[i]}));
      }
}

// The bitwise comparison catches one byte one step away, and a block read with its neighbour's
// scale (a scale lookup off by one block).
TEST(GemmFp8, NegativeControls) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  const int64_t m = 1, n = 64, k = 512;
  const auto x = random_vector(m * k, 3);
  Fp8Case c(n, k, 0, 0, 32, 128, false, 4);
  const auto want_w = c.dequantised();
  std::vector<float> want(m * n), got(m * n);
  cpu::matmul_nt(m, n, k, x.data(), want_w.data(), want.data());
  cpu::matmul_nt_fp8(m, n, k, x.data(), c.weight(), got.data());
  ASSERT_TRUE(identical("unchanged", got, want, {m, n}));

  Fp8Case flipped = c;
  flipped.q[5 * k + 17] ^= 1;
  if (!finite_fp8(flipped.q[5 * k + 17], false)) flipped.q[5 * k + 17] ^= 2;
  cpu::matmul_nt_fp8(m, n, k, x.data(), flipped.weight(), got.data());
  EXPECT_FALSE(identical("one byte flipped", got, want, {m, n}));

  Fp8Case shifted = c;  // block (1, 2) takes block (1, 3)'s scale
  shifted.scale[1 * c.scale_cols + 2] = c.scale[1 * c.scale_cols + 3];
  cpu::matmul_nt_fp8(m, n, k, x.data(), shifted.weight(), got.data());
  EXPECT_FALSE(identical("a neighbour's scale", got, want, {m, n}));
}

}  // namespace
}  // namespace dayzero::kernels
