// dtype conversions against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/status.h"

namespace dayzero {

TEST(DType, ParseAndSize) {
  EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::kF8_E4M3);
  EXPECT_FALSE(parse_dtype("F4").has_value());
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_FALSE(dtype_is_numeric(DType::kBool));
}

TEST(DType, HalfPrecisionRoundTrips) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // exact tie rounds to even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie above odd rounds up
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0xfbff), -65504.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  for (int h = 0; h < 0x7c00; h += 7) EXPECT_EQ(f32_to_f16(f16_to_f32(h)), h) << h;
}

TEST(DType, Fp8) {
  EXPECT_EQ(f8_e4m3_to_f32(0x38), 1.0f);     // exp 7, mant 0
  EXPECT_EQ(f8_e4m3_to_f32(0x7e), 448.0f);   // largest finite
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0x7f)));
  EXPECT_EQ(f8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(f8_e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(f8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(f8_e5m2_to_f32(0x7c)));
}

TEST(Status, ExitCodes) {
  EXPECT_EQ(Status::Ok().exit_code(), 0);
  EXPECT_EQ(Status::Corrupt("x").exit_code(), 2);
  EXPECT_EQ(Status::CheckFailed("x").exit_code(), 1);
  EXPECT_EQ(Status::Timeout("x").exit_code(), 3);
  EXPECT_EQ(Status::NotFound("t").with_context("file a").message(), "file a: t");
}

}  // namespace dayzero
