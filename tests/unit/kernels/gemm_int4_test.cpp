// matmul_nt_int4: a pack-quantized INT4 weight as stored (nibbles two a byte, bf16 group scales),
// converted inside the GEMM. Where matmul_nt takes the built-in small-M kernel (m <= 16)
// the result must carry its bits on the weight dequantised as the loader does it (f32(q) * scale,
// one rounding), here by a decoder of its own; above, the dequantised panels take the large-M
// path, checked against the double-precision twin. Slices that start inside a group at an odd
// column, groups narrower than a vector, odd k (a row's last byte half used), rows padded to
// whole int32 words and scalar tails reach every nibble and scale lookup. Negative controls: one nibble changed, and a group read
// with its neighbour's scale, each break the bitwise check. matmul_nt_shared_x with INT4 products
// mixed in: each has the bits of its own call.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::identical;
using test::random_vector;

// One INT4 slice [n, k] starting at column col0 of a weight in groups of g, rows padded to
// row_bytes, with the bf16 scales of the groups that cover it, and its dequantised f32 form.
struct Int4Case {
  int64_t n, k, col0, g, row_bytes;
  std::vector<int> q;          // [n, k], -8..7
  std::vector<uint8_t> bytes;  // [n, row_bytes]
  std::vector<uint16_t> scale;
  int64_t scale_cols = 0;

  Int4Case(int64_t n_, int64_t k_, int64_t col0_, int64_t g_, bool padded, uint32_t seed)
      : n(n_), k(k_), col0(col0_), g(g_), row_bytes(padded ? (k_ + 7) / 8 * 4 + 4 : (k_ + 1) / 2) {
    q.resize(static_cast<size_t>(n * k));
    for (auto& v : q) {
      seed = seed * 1664525u + 1013904223u;
      v = static_cast<int>(seed >> 28) - 8;
    }
    scale_cols = (col0 + k - 1) / g + 1 - col0 / g;
    // bf16 scales with full mantissas (products with q round in f32 only past 2^-126), some above
    // 1, one subnormal (its products round).
    for (float f : random_vector(static_cast<size_t>(n * scale_cols), seed, 1e-4f, 3.0f)) scale.push_back(bf16(f));
    if (scale.size() > 1) scale[1] = 0x0021;  // a bf16 subnormal
    pack();
  }
  static uint16_t bf16(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return static_cast<uint16_t>(b >> 16);
  }
  static float widen(uint16_t h) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  void pack() {
    bytes.assign(static_cast<size_t>(n * row_bytes), 0xee);  // padding: never read
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        uint8_t& b = bytes[static_cast<size_t>(i * row_bytes + j / 2)];
        if (j % 2 == 0) b = 0;
        b |= static_cast<uint8_t>((q[i * k + j] + 8) << (j % 2 ? 4 : 0));
      }
  }
  cpu::Int4Weight weight() const { return {bytes.data(), scale.data(), row_bytes, scale_cols, col0, g}; }
  std::vector<float> dequantised() const {
    std::vector<float> out(q.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        out[i * k + j] = static_cast<float>(q[i * k + j]) * widen(scale[i * scale_cols + (col0 + j) / g - col0 / g]);
    return out;
  }
  std::string label() const {
    return "int4 " + std::to_string(n) + "x" + std::to_string(k) + " at column " + std::to_string(col0) +
           " groups of " + std::to_string(g) + ", " + std::to_string(row_bytes) + " bytes a row";
  }
};

struct Layout {
  int64_t col0, g;
  bool padded;
};
// Whole weights in groups of 32 (the published layout) and 128; a slice starting inside a group
// at an odd column (steps straddle two groups) in rows of whole words plus one; groups narrower
// than a vector.
const Layout kLayouts[] = {{0, 32, false}, {0, 128, false}, {45, 32, true}, {3, 5, true}};

std::string label(const Int4Case& c, int64_t m, bool acc, int threads) {
  return c.label() + " m=" + std::to_string(m) + (acc ? " accumulate" : "") + " threads=" + std::to_string(threads);
}

TEST(GemmInt4, DequantiseRowsHasTheLoadersBits) {
  uint32_t seed = 10;
  for (const Layout& l : kLayouts)
    for (int64_t k : {1, 15, 600}) {
      const Int4Case c(37, k, l.col0, l.g, l.padded, ++seed);
      const auto want = c.dequantised();
      std::vector<float> got(want.size());
      cpu::dequantise_int4_rows(c.weight(), k, 0, c.n, got.data());
      ASSERT_TRUE(identical(c.label(), got, want, {c.n, k}));
      std::vector<float> part(static_cast<size_t>(5 * k));
      cpu::dequantise_int4_rows(c.weight(), k, 30, 5, part.data());
      ASSERT_TRUE(identical(c.label() + " rows 30..35", part,
                            std::vector<float>(want.begin() + 30 * k, want.begin() + 35 * k), {5, k}));
    }
}

// Decode shapes: m of the small-M kernel, n and k with edges and scalar tails, one and two threads.
TEST(GemmInt4, SmallMHasTheBitsOfTheDequantisedWeight) {
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
              const Int4Case c(n, k, l.col0, l.g, l.padded, seed);
              const auto x = random_vector(m * k, seed + 3);
              auto got = random_vector(m * n, seed + 5), want = got;
              cpu::matmul_nt_int4(m, n, k, x.data(), c.weight(), got.data(), acc);
              cpu::matmul_nt(m, n, k, x.data(), c.dequantised().data(), want.data(), acc);
              ASSERT_TRUE(identical(label(c, m, acc, threads), got, want, {m, n}));
            }
  }
  cpu::gemm_set_threads(threads0);
}

// Above m = 16: the dequantised panels through the large-M path, against the twin (the
// tolerance of gemm_fp8_test, whose panels are the same code).
TEST(GemmInt4, LargeMMatchesTheTwin) {
  uint32_t seed = 900;
  struct Shape {
    int64_t m, n, k;
  };
  for (const auto [m, n, k] : {Shape{17, 33, 15}, Shape{17, 700, 4100}, Shape{64, 130, 600}})
    for (const Layout& l : kLayouts)
      for (bool acc : {false, true}) {
        ++seed;
        const Int4Case c(n, k, l.col0, l.g, l.padded, seed);
        const auto x = random_vector(m * k, seed + 3);
        auto got = random_vector(m * n, seed + 5);
        const auto ref = test::matmul_nt_twin(m, n, k, x, c.dequantised(), got, acc);
        cpu::matmul_nt_int4(m, n, k, x.data(), c.weight(), got.data(), acc);
        ASSERT_TRUE(close(label(c, m, acc, cpu::gemm_info().threads), got, ref, {m, n}, 4e-7, seed));
      }
}

// INT4 and f32 products of one x in one call: each has the bits of its own call.
TEST(GemmSharedX, Int4ProductsHaveTheBitsOfTheirOwnCall) {
  uint32_t seed = 1300;
  for (int64_t m : {1, 3, 16, 17})
    for (int64_t k : {15, 600})
      for (bool acc : {false, true}) {
        const std::vector<int64_t> ns = {130, 7, 64};
        const auto x = random_vector(m * k, ++seed);
        const Int4Case a(ns[0], k, 45, 32, true, ++seed), b(ns[2], k, 0, 5, false, ++seed);
        const cpu::Int4Weight wa = a.weight(), wb = b.weight();
        const auto wf = random_vector(ns[1] * k, ++seed);
        std::vector<std::vector<float>> got(3), want(3);
        for (size_t i = 0; i < 3; ++i) got[i] = want[i] = random_vector(m * ns[i], ++seed);
        cpu::matmul_nt_int4(m, ns[0], k, x.data(), wa, want[0].data(), acc);
        cpu::matmul_nt(m, ns[1], k, x.data(), wf.data(), want[1].data(), acc);
        cpu::matmul_nt_int4(m, ns[2], k, x.data(), wb, want[2].data(), acc);
        const cpu::NtProduct products[] = {{ns[0], &wa, cpu::WeightKind::kInt4, got[0].data()},
                                           {ns[1], wf.data(), cpu::WeightKind::kF32, got[1].data()},
                                           {ns[2], &wb, cpu::WeightKind::kInt4, got[2].data()}};
        cpu::matmul_nt_shared_x(m, k, x.data(), products, 3, acc);
        for (size_t i = 0; i < 3; ++i)
          ASSERT_TRUE(identical("m=" + std::to_string(m) + " k=" + std::to_string(k) + " product " + std::to_string(i),
                                got[i], want[i], {m, ns[i]}));
      }
}

// The bitwise comparison catches one nibble one step away (the high nibble of a byte: a
// low/high swap in the unpacking would miss it), and a group read with its neighbour's scale.
TEST(GemmInt4, NegativeControls) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  const int64_t m = 1, n = 64, k = 512;
  const auto x = random_vector(m * k, 3);
  const Int4Case c(n, k, 0, 32, false, 4);
  std::vector<float> want(m * n), got(m * n);
  cpu::matmul_nt(m, n, k, x.data(), c.dequantised().data(), want.data());
  cpu::matmul_nt_int4(m, n, k, x.data(), c.weight(), got.data());
  ASSERT_TRUE(identical("unchanged", got, want, {m, n}));

  Int4Case changed = c;
  int& v = changed.q[5 * k + 17];
  v = v == 7 ? 6 : v + 1;
  changed.pack();
  cpu::matmul_nt_int4(m, n, k, x.data(), changed.weight(), got.data());
  EXPECT_FALSE(identical("one nibble changed", got, want, {m, n}));

  Int4Case shifted = c;  // row 1's group 2 takes group 3's scale
  shifted.scale[1 * c.scale_cols + 2] = c.scale[1 * c.scale_cols + 3];
  cpu::matmul_nt_int4(m, n, k, x.data(), shifted.weight(), got.data());
  EXPECT_FALSE(identical("a neighbour's scale", got, want, {m, n}));
}

}  // namespace
}  // namespace dayzero::kernels
