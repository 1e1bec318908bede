// The table of formats kept as stored (core/stored_format.h) and the FP4 scalar decoders.
#include "core/stored_format.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace dayzero {
namespace {

// One row per StoredScheme, in its order.
constexpr StoredFormat kStoredFormats[] = {
    {StoredScheme::kFp8Block, "fp8-block", "F8_E4M3 or F8_E5M2, one a byte", 8, 8, 128, 128, ScaleKind::kF32, 4, 0},
    {StoredScheme::kInt4Group, "int4-pack", "int4 (q + 8), eight an int32 word, low nibble first", 4, 32, 1, 32,
     ScaleKind::kBF16, 2, 0},
    {StoredScheme::kMxfp4, "mxfp4", "E2M1, two a byte, low nibble first", 4, 8, 1, 32, ScaleKind::kUE8M0, 1, 0},
    {StoredScheme::kNvfp4, "nvfp4", "E2M1, two a byte, low nibble first", 4, 8, 1, 16, ScaleKind::kE4M3, 1, 4},
};
static_assert(sizeof(kStoredFormats) / sizeof(kStoredFormats[0]) == static_cast<size_t>(StoredScheme::kNvfp4) + 1,
              "one row per StoredScheme, in order");

}  // namespace

const StoredFormat& stored_format(StoredScheme scheme) { return kStoredFormats[static_cast<int>(scheme)]; }

const StoredFormat* find_stored_format(std::string_view name) {
  for (const auto& f : kStoredFormats)
    if (name == f.name) return &f;
  return nullptr;
}

float e2m1_to_f32(uint8_t code) {
  DZ_CHECK(code < 16, "e2m1 code " << int{code} << " is not 4 bits");
  // Exponent field e (bits 2..1), mantissa m (bit 0): e = 0 is subnormal, m * 0.5; else
  // 2^(e - 1) * (1 + m / 2).
  const int e = (code >> 1) & 3, m = code & 1;
  const float mag = e == 0 ? 0.5f * static_cast<float>(m) : std::ldexp(1.0f + 0.5f * static_cast<float>(m), e - 1);
  return (code & 8) ? -mag : mag;
}

float ue8m0_to_f32(uint8_t e) { return f8_e8m0_to_f32(e); }

float fp4_group_scale(ScaleKind kind, uint8_t byte, float global_scale) {
  switch (kind) {
    case ScaleKind::kUE8M0: return ue8m0_to_f32(byte);
    case ScaleKind::kE4M3: return f8_e4m3_to_f32(byte) / global_scale;
    case ScaleKind::kF32:
    case ScaleKind::kBF16: break;
  }
  DZ_CHECK(false, "fp4_group_scale: not an FP4 scale kind");
  return 0.0f;
}

}  // namespace dayzero
