// matmul_nt_stored on an FP4 weight as stored (E2M1 codes two a byte, one scale byte per group: UE8M0
// per 32 for MXFP4, E4M3 per 16 over a per-tensor global scale for NVFP4), converted inside the
// GEMM. The decoders are checked against a table of the spec written out here (all 16 E2M1 codes,
// UE8M0's edges 2^-127 and 2^127 and its NaN code 0xFF); the kernels against a dequantiser of this
// file's own built on that table: where matmul_nt takes the built-in small-M kernel (m <= 16) the
// bits of matmul_nt on the dequantised weight, above the double-precision twin (the large-M path
// sums dequantised panels). Slices that start inside a group at an odd column, groups narrower
// than a vector, odd k and rows padded past their last byte reach every nibble and scale lookup.
// Negative controls: one code changed (the high nibble of its byte), a group read with its
// neighbour's scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/stored_format.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"
#include "tests/unit/kernels/quantized_gemm_checks.h"

namespace dayzero::kernels {
namespace {

using test::identical;
using test::random_vector;

// OCP Microscaling Formats (MX) v1.0, table of FP4 E2M1 values, by code: sign, two exponent
// bits (bias 1), one mantissa bit; exponent 0 is subnormal (0 and 0.5).
const float kSpecE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// UE8M0 as the spec gives it: 2^(e - 127) for e in 0..254, written out from powers of two.
double spec_ue8m0(int e) {
  double v = 1.0;
  for (int i = 0; i < std::abs(e - 127); ++i) v = e >= 127 ? v * 2.0 : v / 2.0;
  return v;
}

TEST(Fp4Decode, AllSixteenE2m1Codes) {
  for (int c = 0; c < 16; ++c) {
    const float got = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(got, kSpecE2m1[c]) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(kSpecE2m1[c])) << "code " << c << ": the sign of zero";
  }
}

TEST(Fp4Decode, Ue8m0EdgesAndNaN) {
  for (int e = 0; e < 255; ++e)
    EXPECT_EQ(static_cast<double>(ue8m0_to_f32(static_cast<uint8_t>(e))), spec_ue8m0(e)) << "e " << e;
  EXPECT_EQ(ue8m0_to_f32(0), std::ldexp(1.0f, -127));  // an f32 subnormal
  EXPECT_GT(ue8m0_to_f32(0), 0.0f);
  EXPECT_EQ(ue8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(0xff)));
  // The element is one f32 multiply: 0.5 x 2^-127 = 2^-128 (subnormal, exact); 6 x 2^127
  // overflows to infinity, which the loader counts.
  EXPECT_EQ(kSpecE2m1[1] * ue8m0_to_f32(0), std::ldexp(1.0f, -128));
  EXPECT_TRUE(std::isinf(kSpecE2m1[7] * ue8m0_to_f32(254)));
  // NVFP4: f32(E4M3) / global; 0x38 is 1.0, 0x7e is 448.
  EXPECT_EQ(fp4_group_scale(ScaleKind::kE4M3, 0x38, 4.0f), 0.25f);
  EXPECT_EQ(fp4_group_scale(ScaleKind::kE4M3, 0x7e, 448.0f), 1.0f);
  EXPECT_TRUE(std::isnan(fp4_group_scale(ScaleKind::kE4M3, 0x7f, 1.0f)));
  EXPECT_EQ(fp4_group_scale(ScaleKind::kUE8M0, 130, 1.0f), 8.0f);
}

TEST(StoredFormatTable, RowsAndHeldBytes) {
  const StoredFormat& mx = stored_format(StoredScheme::kMxfp4);
  const StoredFormat& nv = stored_format(StoredScheme::kNvfp4);
  EXPECT_EQ(find_stored_format("mxfp4"), &mx);
  EXPECT_EQ(find_stored_format("nvfp4"), &nv);
  EXPECT_EQ(find_stored_format("fp8-block"), &stored_format(StoredScheme::kFp8Block));
  EXPECT_EQ(find_stored_format("int4-pack"), &stored_format(StoredScheme::kInt4Group));
  EXPECT_EQ(find_stored_format("fp5"), nullptr);
  // A 7168 x 2048 expert: 0.5 B a weight plus one byte per 32 (MXFP4) or per 16 and 4 (NVFP4).
  EXPECT_EQ((StoredSlice{&mx, 7168, 2048, 0, 0, 1, 32}.held_bytes()), 7168 * 1024 + 7168 * 64);
  EXPECT_EQ((StoredSlice{&nv, 7168, 2048, 0, 0, 1, 16}.held_bytes()), 7168 * 1024 + 7168 * 128 + 4);
  // Columns 45..100 of a row: bytes 22..49 (28) and groups 1..3 (3).
  EXPECT_EQ((StoredSlice{&mx, 2, 55, 0, 45, 1, 32}.held_bytes()), 2 * (28 + 3));
  // FP8: one byte an element and an f32 scale per covering block; INT4: the covering int32 words
  // and a bf16 scale per covering group (their rules before the table, written out).
  const StoredFormat& fp8 = stored_format(StoredScheme::kFp8Block);
  // rows 100..399: blocks 0..3; columns 70..269: blocks 0..2.
  EXPECT_EQ((StoredSlice{&fp8, 300, 200, 100, 70, 128, 128}.held_bytes()), 300 * 200 + 4 * 3 * 4);
  const StoredFormat& i4 = stored_format(StoredScheme::kInt4Group);
  EXPECT_EQ((StoredSlice{&i4, 5, 25, 0, 13, 1, 32}.held_bytes()), 5 * (4 * 4 + 2 * 2));
  EXPECT_EQ((StoredSlice{&mx, 0, 64, 0, 0, 1, 32}.held_bytes()), 0);
}

// One FP4 slice [n, k] starting at column col0 of a weight in groups of g, rows padded to
// row_bytes, with the scale bytes of the groups covering it, and its dequantised f32 form.
struct Fp4Case {
  int64_t n, k, col0, g, row_bytes;
  bool nv;
  float global;
  std::vector<int> code;       // [n, k], 0..15
  std::vector<uint8_t> bytes;  // [n, row_bytes]
  std::vector<uint8_t> scale;  // [n, scale_cols]
  int64_t scale_cols = 0;

  Fp4Case(int64_t n_, int64_t k_, int64_t col0_, int64_t g_, bool padded, bool nv_, uint32_t seed)
      : n(n_), k(k_), col0(col0_), g(g_), row_bytes(padded ? (k_ + 1) / 2 + 3 : (k_ + 1) / 2), nv(nv_),
        global(nv_ ? 448.0f * 6.0f / 3.7f : 1.0f) {
    code.resize(static_cast<size_t>(n * k));
    for (auto& v : code) {
      seed = seed * 1664525u + 1013904223u;
      v = static_cast<int>(seed >> 28);
    }
    scale_cols = (col0 + k - 1) / g + 1 - col0 / g;
    scale.resize(static_cast<size_t>(n * scale_cols));
    for (auto& s : scale) {
      seed = seed * 1664525u + 1013904223u;
      // MXFP4: exponents 117..136 (2^-10..2^9); NVFP4: positive finite E4M3 bytes 0x01..0x7e.
      s = nv ? static_cast<uint8_t>(1 + (seed >> 8) % 0x7e) : static_cast<uint8_t>(117 + (seed >> 8) % 20);
    }
    if (!nv && scale.size() > 2) scale[1] = 0, scale[2] = 1;  // 2^-127 and 2^-126: products in subnormals
    pack();
  }
  void pack() {
    bytes.assign(static_cast<size_t>(n * row_bytes), 0xee);  // padding: never read
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        uint8_t& b = bytes[static_cast<size_t>(i * row_bytes + j / 2)];
        if (j % 2 == 0) b = 0;
        b |= static_cast<uint8_t>(code[i * k + j] << (j % 2 ? 4 : 0));
      }
  }
  float group_scale(uint8_t s) const {
    if (!nv) return static_cast<float>(spec_ue8m0(s));
    // E4M3 written out: exponent bias 7, subnormals at exponent 0.
    const int e = (s >> 3) & 15, m = s & 7;
    const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
    return v / global;
  }
  cpu::StoredWeight weight() const {
    return {nv ? StoredScheme::kNvfp4 : StoredScheme::kMxfp4, bytes.data(), scale.data(), row_bytes, scale_cols, 0, col0,
            1, g, false, global};
  }
  std::vector<float> dequantised() const {
    std::vector<float> out(code.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        out[i * k + j] = kSpecE2m1[code[i * k + j]] * group_scale(scale[i * scale_cols + (col0 + j) / g - col0 / g]);
    return out;
  }
  std::string label() const {
    return std::string(nv ? "nvfp4 " : "mxfp4 ") + std::to_string(n) + "x" + std::to_string(k) + " at column " +
           std::to_string(col0) + " groups of " + std::to_string(g) + ", " + std::to_string(row_bytes) + " bytes a row";
  }
};

struct Layout {
  int64_t col0, g;
  bool padded, nv;
};
// The published layouts (MXFP4 groups of 32, NVFP4 groups of 16, whole weights); slices starting
// inside a group at an odd column in padded rows; groups narrower than a vector.
const Layout kLayouts[] = {{0, 32, false, false}, {0, 16, false, true}, {45, 32, true, false},
                           {19, 16, true, true},  {3, 5, true, false}};

Fp4Case make_case(int64_t n, int64_t k, const Layout& l, uint32_t seed) {
  return Fp4Case(n, k, l.col0, l.g, l.padded, l.nv, seed);
}

TEST(GemmFp4, DequantiseRowsHasTheSpecsBits) {
  test::check_dequantise_rows(kLayouts, make_case, cpu::dequantise_stored_rows);
}

TEST(GemmFp4, SmallMHasTheBitsOfTheDequantisedWeight) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  test::check_small_m_bits(kLayouts, make_case, cpu::matmul_nt_stored);
}

TEST(GemmFp4, LargeMMatchesTheTwin) { test::check_large_m_twin(kLayouts, make_case, cpu::matmul_nt_stored); }

TEST(GemmSharedX, Fp4ProductsHaveTheBitsOfTheirOwnCall) {
  const auto inside_a_group = [](int64_t n, int64_t k, uint32_t seed) { return Fp4Case(n, k, 45, 32, true, false, seed); };
  const auto nvfp4 = [](int64_t n, int64_t k, uint32_t seed) { return Fp4Case(n, k, 0, 16, false, true, seed); };
  test::check_shared_x(inside_a_group, nvfp4, cpu::matmul_nt_stored);
}

TEST(GemmFp4, NegativeControls) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  const int64_t m = 1, n = 64, k = 512;
  const auto x = random_vector(m * k, 3);
  const Fp4Case c(n, k, 0, 32, false, false, 4);
  std::vector<float> want(m * n), got(m * n);
  cpu::matmul_nt(m, n, k, x.data(), c.dequantised().data(), want.data());
  cpu::matmul_nt_stored(m, n, k, x.data(), c.weight(), got.data());
  ASSERT_TRUE(identical("unchanged", got, want, {m, n}));

  Fp4Case changed = c;
  int& v = changed.code[5 * k + 17];
  v = v == 7 ? 6 : (v == 15 ? 14 : v + 1);
  changed.pack();
  cpu::matmul_nt_stored(m, n, k, x.data(), changed.weight(), got.data());
  EXPECT_FALSE(identical("one code changed", got, want, {m, n}));

  Fp4Case shifted = c;  // row 1's group 2 takes group 3's scale
  shifted.scale[1 * c.scale_cols + 2] = static_cast<uint8_t>(c.scale[1 * c.scale_cols + 3] + 1);
  cpu::matmul_nt_stored(m, n, k, x.data(), shifted.weight(), got.data());
  EXPECT_FALSE(identical("a neighbour's scale", got, want, {m, n}));
}

}  // namespace
}  // namespace dayzero::kernels
