// The table of formats kept as stored (core/stored_format.h), the FP4 scalar decoders, and the
// checks of a stored weight slice (core/stored_weight.h).
#include "core/stored_format.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "core/dtype.h"
#include "core/stored_weight.h"

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
static_assert(sizeof(kStoredFormats) / sizeof(kStoredFormats[0]) == kStoredSchemeCount &&
                  static_cast<int>(StoredScheme::kNvfp4) + 1 == kStoredSchemeCount,
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

// StoredWeightSlice (core/stored_weight.h).
DType scale_dtype(ScaleKind kind) {
  switch (kind) {
    case ScaleKind::kF32: return DType::kF32;
    case ScaleKind::kBF16: return DType::kBF16;
    case ScaleKind::kUE8M0:
    case ScaleKind::kE4M3: return DType::kU8;
  }
  return DType::kU8;
}

bool is_stored_weight_dtype(DType t) {
  return t == DType::kF8_E4M3 || t == DType::kF8_E5M2 || t == DType::kI4 || t == DType::kF4;
}

DType StoredWeightSlice::held_dtype() const {
  switch (slice.format->scheme) {
    case StoredScheme::kFp8Block: return values.dtype();
    case StoredScheme::kInt4Group: return DType::kI4;
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4: return DType::kF4;
  }
  return DType::kU8;
}

std::string StoredWeightSlice::shape_error() const {
  if (!slice.format) return "no stored format";
  const StoredFormat& f = *slice.format;
  std::ostringstream os;
  const bool fp8 = f.scheme == StoredScheme::kFp8Block;
  const bool values_ok = fp8 ? (values.dtype() == DType::kF8_E4M3 || values.dtype() == DType::kF8_E5M2)
                             : values.dtype() == DType::kU8;
  const bool empty = slice.rows <= 0 || slice.cols <= 0;
  if (!values_ok || values.rank() != 2 || values.dim(0) != slice.rows ||
      (!empty && values.dim(1) != slice.value_row_bytes()))
    os << f.name << " values " << dtype_name(values.dtype()) << " " << shape_str(values.shape()) << " for "
       << slice.rows << " x " << slice.cols << " from column " << slice.col0 << " (expected "
       << (fp8 ? "F8" : "U8") << " [" << slice.rows << ", " << (empty ? 0 : slice.value_row_bytes()) << "])";
  else if (scale.dtype() != scale_dtype(f.scale) || (!empty && scale.numel() != slice.scale_rows() * slice.scale_cols()))
    os << f.name << " scale " << dtype_name(scale.dtype()) << " " << shape_str(scale.shape()) << " for "
       << slice.scale_rows() << " x " << slice.scale_cols() << " blocks of " << dtype_name(scale_dtype(f.scale));
  return os.str();
}

}  // namespace dayzero
