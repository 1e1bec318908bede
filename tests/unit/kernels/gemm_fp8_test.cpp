// matmul_nt_stored on a block-scaled FP8 weight as stored, converted inside the GEMM. Where matmul_nt
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
#include "tests/unit/kernels/quantized_gemm_checks.h"

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
  cpu::StoredWeight weight() const {
    cpu::StoredWeight w;
    w.scheme = StoredScheme::kFp8Block;
    w.q = q.data();
    w.row_bytes = k;
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

// A case of a layout, for the shared checks (quantized_gemm_checks.h).
Fp8Case make_case(int64_t n, int64_t k, const Layout& l, uint32_t seed) {
  return Fp8Case(n, k, l.row0, l.col0, l.br, l.bc, l.e5m2, seed);
}

TEST(GemmFp8, DequantiseRowsHasTheLoadersBits) {
  test::check_dequantise_rows(kLayouts, make_case, cpu::dequantise_stored_rows);
}

TEST(GemmFp8, SmallMHasTheBitsOfTheDequantisedWeight) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  test::check_small_m_bits(kLayouts, make_case, cpu::matmul_nt_stored);
}

TEST(GemmFp8, LargeMMatchesTheTwin) { test::check_large_m_twin(kLayouts, make_case, cpu::matmul_nt_stored); }

// FP8 and f32 products of one x in one call: each has the bits of its own call.
TEST(GemmSharedX, Fp8ProductsHaveTheBitsOfTheirOwnCall) {
  const auto inside_a_block = [](int64_t n, int64_t k, uint32_t seed) {
    return Fp8Case(n, k, 70, 45, 128, 128, false, seed);
  };
  const auto e5m2 = [](int64_t n, int64_t k, uint32_t seed) { return Fp8Case(n, k, 0, 0, 16, 24, true, seed); };
  test::check_shared_x(inside_a_block, e5m2, cpu::matmul_nt_stored);
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
  cpu::matmul_nt_stored(m, n, k, x.data(), c.weight(), got.data());
  ASSERT_TRUE(identical("unchanged", got, want, {m, n}));

  Fp8Case flipped = c;
  flipped.q[5 * k + 17] ^= 1;
  if (!finite_fp8(flipped.q[5 * k + 17], false)) flipped.q[5 * k + 17] ^= 2;
  cpu::matmul_nt_stored(m, n, k, x.data(), flipped.weight(), got.data());
  EXPECT_FALSE(identical("one byte flipped", got, want, {m, n}));

  Fp8Case shifted = c;  // block (1, 2) takes block (1, 3)'s scale
  shifted.scale[1 * c.scale_cols + 2] = c.scale[1 * c.scale_cols + 3];
  cpu::matmul_nt_stored(m, n, k, x.data(), shifted.weight(), got.data());
  EXPECT_FALSE(identical("a neighbour's scale", got, want, {m, n}));
}

}  // namespace
}  // namespace dayzero::kernels
