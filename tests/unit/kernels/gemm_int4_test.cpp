// matmul_nt_stored on a pack-quantized INT4 weight as stored (nibbles two a byte, bf16 group scales),
// converted inside the GEMM. Where matmul_nt takes the built-in small-M kernel (m <= 16)
// the result must carry its bits on the weight dequantised as the loader does it (f32(q) * scale,
// one rounding), here by a decoder of its own; above, the dequantised panels take the large-M
// path, checked against the double-precision twin. Slices that start inside a group at an odd
// column, groups narrower than a vector, odd k (a row's last byte half used), rows padded to
// whole int32 words and scalar tails reach every nibble and scale lookup. Negative controls:
// one nibble changed, and a group read with its neighbour's scale, each break the bitwise
// check. matmul_nt_shared_x with INT4 products mixed in: each has the bits of its own call.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
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
  cpu::StoredWeight weight() const {
    return {StoredScheme::kInt4Group, bytes.data(), scale.data(), row_bytes, scale_cols, 0, col0, 1, g};
  }
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

// A case of a layout, for the shared checks (quantized_gemm_checks.h).
Int4Case make_case(int64_t n, int64_t k, const Layout& l, uint32_t seed) {
  return Int4Case(n, k, l.col0, l.g, l.padded, seed);
}

TEST(GemmInt4, DequantiseRowsHasTheLoadersBits) {
  test::check_dequantise_rows(kLayouts, make_case, cpu::dequantise_stored_rows);
}

TEST(GemmInt4, SmallMHasTheBitsOfTheDequantisedWeight) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  test::check_small_m_bits(kLayouts, make_case, cpu::matmul_nt_stored);
}

TEST(GemmInt4, LargeMMatchesTheTwin) { test::check_large_m_twin(kLayouts, make_case, cpu::matmul_nt_stored); }

// INT4 and f32 products of one x in one call: each has the bits of its own call.
TEST(GemmSharedX, Int4ProductsHaveTheBitsOfTheirOwnCall) {
  const auto inside_a_group = [](int64_t n, int64_t k, uint32_t seed) { return Int4Case(n, k, 45, 32, true, seed); };
  const auto narrow_groups = [](int64_t n, int64_t k, uint32_t seed) { return Int4Case(n, k, 0, 5, false, seed); };
  test::check_shared_x(inside_a_group, narrow_groups, cpu::matmul_nt_stored);
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
  cpu::matmul_nt_stored(m, n, k, x.data(), c.weight(), got.data());
  ASSERT_TRUE(identical("unchanged", got, want, {m, n}));

  Int4Case changed = c;
  int& v = changed.q[5 * k + 17];
  v = v == 7 ? 6 : v + 1;
  changed.pack();
  cpu::matmul_nt_stored(m, n, k, x.data(), changed.weight(), got.data());
  EXPECT_FALSE(identical("one nibble changed", got, want, {m, n}));

  Int4Case shifted = c;  // row 1's group 2 takes group 3's scale
  shifted.scale[1 * c.scale_cols + 2] = c.scale[1 * c.scale_cols + 3];
  cpu::matmul_nt_stored(m, n, k, x.data(), shifted.weight(), got.data());
  EXPECT_FALSE(identical("a neighbour's scale", got, want, {m, n}));
}

}  // namespace
}  // namespace dayzero::kernels
