// dtype tables and scalar conversions (bit-exact, portable; no hardware f16 assumed).
#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace dayzero {
namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t bits;
  bool numeric;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "F32", 32, true, true},       {DType::kF16, "F16", 16, true, true},
    {DType::kBF16, "BF16", 16, true, true},     {DType::kF8_E4M3, "F8_E4M3", 8, true, true},
    {DType::kF8_E5M2, "F8_E5M2", 8, true, true}, {DType::kI8, "I8", 8, true, false},
    {DType::kI16, "I16", 16, true, false},      {DType::kI32, "I32", 32, true, false},
    {DType::kI64, "I64", 64, true, false},      {DType::kU8, "U8", 8, true, false},
    {DType::kBool, "BOOL", 8, false, false},    {DType::kI4, "I4", 4, false, false},
    {DType::kF8_E8M0, "F8_E8M0", 8, true, true}, {DType::kF4, "F4", 4, false, false},
};
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(DType::kF4) + 1, "one row per DType, in order");
const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }

float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
}  // namespace

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& i : kInfo)
    if (s == i.name && i.t != DType::kI4 && i.t != DType::kF4) return i.t;
  return std::nullopt;
}
const char* dtype_name(DType t) { return info(t).name; }
size_t dtype_size(DType t) {
  DZ_CHECK(info(t).bits % 8 == 0, "dtype_size of " << info(t).name << ": a sub-byte type (dtype_bits)");
  return info(t).bits / 8;
}
size_t dtype_bits(DType t) { return info(t).bits; }
size_t dtype_row_bytes(DType t, int64_t cols) {
  return (static_cast<size_t>(cols) * info(t).bits + 7) / 8;
}
bool dtype_is_numeric(DType t) { return info(t).numeric; }
bool dtype_is_float(DType t) { return info(t).is_float; }

float bf16_to_f32(uint16_t v) { return bits_to_f32(static_cast<uint32_t>(v) << 16); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);  // subnormal
  } else if (exp == 31) {
    mag = mant ? NAN : INFINITY;
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -mag : mag;
}

float f8_e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 0x7;
  float mag;
  if (exp == 0xf && mant == 0x7) {
    mag = NAN;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -9);  // 2^(1-7) * m/8
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x8), static_cast<int>(exp) - 10);
  }
  return sign ? -mag : mag;
}

float f8_e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }
float f8_e8m0_to_f32(uint8_t v) { return v == 0xff ? NAN : std::ldexp(1.0f, static_cast<int>(v) - 127); }

uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

uint16_t f32_to_f16(float f) {
  const uint32_t b = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t abs = b & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520 -> inf
  if (abs < 0x38800000) {                       // subnormal or zero in f16
    const float a = bits_to_f32(abs);
    const float scaled = a * 16777216.0f;  // 2^24: exact, then round to nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mant = abs & 0x7fffff;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      // Widening by a shift, on whole arrays so the compiler vectorises it.
      const auto* in = static_cast<const uint16_t*>(src);
      auto* out = reinterpret_cast<uint32_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
      return;
    }
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = f16_to_f32(v);
      }
      return;
    case DType::kF8_E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e4m3_to_f32(p[i]);
      return;
    case DType::kF8_E5M2:
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e5m2_to_f32(p[i]);
      return;
    case DType::kF8_E8M0:
      for (size_t i = 0; i < n; ++i) dst[i] = f8_e8m0_to_f32(p[i]);
      return;
    case DType::kI8:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
    case DType::kU8:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
      return;
    case DType::kI16:
      for (size_t i = 0; i < n; ++i) {
        int16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kI32:
      for (size_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kI64:
      for (size_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kBool:
    case DType::kF4:
    case DType::kI4: break;  // kI4 has scales besides its nibbles: the kernels' dequantise_stored_rows
  }
  DZ_CHECK(false, "convert_to_f32: dtype " << dtype_name(t) << " is not numeric");
}

void convert_from_f32(DType t, const float* src, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &v, 2);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = f32_to_f16(src[i]);
        std::memcpy(p + 2 * i, &v, 2);
      }
      return;
    default: break;
  }
  DZ_CHECK(false, "convert_from_f32: cannot write dtype " << dtype_name(t));
}

}  // namespace dayzero
