// Element types as stored in checkpoints (safetensors names) and their conversion to the
// f32 compute type. Conversions are exact widenings except f32 -> bf16/f16 (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dayzero {

// kI4 is not a safetensors dtype: a pack-quantized INT4 weight as the CPU backend keeps it (two
// elements a byte, low nibble first, each stored as q + 8; bytes() counts each row from a byte,
// the backend's layout may pad rows further: kernels/ops.h StoredWeight), never read from or
// written to a file.
// kF8_E8M0 (safetensors "F8_E8M0", torch.float8_e8m0fnu): the UE8M0 scales of MX formats,
// 2^(e - 127), 0xFF NaN.
// kF4 is not a safetensors dtype either: an FP4 weight (MXFP4, NVFP4) as the CPU backend keeps
// it (E2M1 codes two a byte, low nibble first, with its group scales: kernels/ops.h StoredWeight).
enum class DType : uint8_t { kF32, kF16, kBF16, kF8_E4M3, kF8_E5M2, kI8, kI16, kI32, kI64, kU8, kBool, kI4, kF8_E8M0, kF4 };

// Parses a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...); nullopt when unknown
// (and for "I4", "F4": kI4 and kF4 have no file form).
std::optional<DType> parse_dtype(std::string_view s);
// The safetensors spelling ("I4" for kI4).
const char* dtype_name(DType t);
// Bytes an element. REQUIRES: not a sub-byte type (kI4: dtype_bits).
size_t dtype_size(DType t);
size_t dtype_bits(DType t);
// Bytes of a row-major array of `rows` rows of `cols` elements (a sub-byte row starts on a byte).
size_t dtype_row_bytes(DType t, int64_t cols);
// Float types and integer types can be converted to f32; BOOL cannot.
bool dtype_is_numeric(DType t);
bool dtype_is_float(DType t);

float bf16_to_f32(uint16_t v);
float f16_to_f32(uint16_t v);
float f8_e4m3_to_f32(uint8_t v);  // OCP E4M3FN: no infinities, S.1111.111 is NaN
float f8_e5m2_to_f32(uint8_t v);
float f8_e8m0_to_f32(uint8_t v);  // 2^(v - 127); 0xff is NaN
uint16_t f32_to_bf16(float v);  // round to nearest even, NaN stays NaN
uint16_t f32_to_f16(float v);   // round to nearest even, overflow -> inf

// dst[i] = (float)src[i] for n elements of type t (little-endian storage). REQUIRES: numeric t.
void convert_to_f32(DType t, const void* src, float* dst, size_t n);
// Writes n floats as type t (F32, F16 or BF16). REQUIRES: one of those.
void convert_from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace dayzero
