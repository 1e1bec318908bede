// The formats of quantized weights kept as stored, as one table: a format is a row (how its
// values are typed and packed, the block one scale covers, the scale's type as held, a
// per-tensor scale), and the byte rule of a held slice is one function of that row, which the
// planner (plan/memory.cpp, plan/slicing.cpp), the loaders (checkpoint/fp8.h,
// checkpoint/pack_quantized.h, checkpoint/fp4.h) and the backends' allocations all call, so the
// plan's per-rank bytes and the allocation cannot drift apart. Also the scalar decoders of the
// FP4 formats' elements and scales (the spec, used by the loaders' dequantisation; the CPU
// kernels' dequantise-rows functions give the same values). Not the kernels themselves.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace dayzero {

enum class StoredScheme : uint8_t { kFp8Block, kInt4Group, kMxfp4, kNvfp4 };
inline constexpr int kStoredSchemeCount = 4;  // the rows of the table
// Whether `scheme` is one of the FP4 rows (E2M1 codes: mxfp4, nvfp4).
inline bool is_fp4(StoredScheme scheme) { return scheme == StoredScheme::kMxfp4 || scheme == StoredScheme::kNvfp4; }

// The scale of a block as the backend holds it.
enum class ScaleKind : uint8_t {
  kF32,    // FP8 block scales (F32, BF16 or UE8M0 in the file: widened on load)
  kBF16,   // INT4 group scales, as stored
  kUE8M0,  // MXFP4: one byte, 2^(e - 127); 0xFF is NaN (refused on load)
  kE4M3,   // NVFP4: one FP8 E4M3 byte, divided by the tensor's global scale
};

struct StoredFormat {
  StoredScheme scheme;
  const char* name;        // "fp8-block", "int4-pack", "mxfp4", "nvfp4"
  const char* values;      // how the values are typed and packed
  int value_bits;          // bits an element: 8 or 4
  int unit_bits;           // the unit a row's values are held in: a byte, or INT4's int32 words
  int64_t block_rows;      // the block one scale covers by default (FP8: quantization_config's)
  int64_t block_cols;
  ScaleKind scale;         // the scale as held
  int scale_bytes;         // bytes of one held scale
  int global_scale_bytes;  // a per-tensor f32 scale (NVFP4), else 0
};

// The row of `scheme`.
const StoredFormat& stored_format(StoredScheme scheme);
// The row named `name` ("mxfp4", ...); nullptr when none.
const StoredFormat* find_stored_format(std::string_view name);

// The blocks of size `block` that cover indices [begin, end) of one dimension, as the block
// index range [first, last); an empty range is covered by no block (first == last).
// REQUIRES: block > 0, 0 <= begin.
inline std::pair<int64_t, int64_t> covering_blocks(int64_t begin, int64_t end, int64_t block) {
  if (end <= begin) return {begin / block, begin / block};
  return {begin / block, (end - 1) / block + 1};
}

// The slice [row0, row0 + rows) x [col0, col0 + cols) of a weight in `format`, quantized in
// blocks of block_rows x block_cols, as a backend holds it: each row's values in the units
// that cover its columns, the scales of the blocks that cover the slice, the global scale.
struct StoredSlice {
  const StoredFormat* format = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t block_rows = 0, block_cols = 0;

  int64_t scale_rows() const {
    const auto [a, b] = covering_blocks(row0, row0 + rows, block_rows);
    return b - a;
  }
  int64_t scale_cols() const {
    const auto [a, b] = covering_blocks(col0, col0 + cols, block_cols);
    return b - a;
  }
  // Bytes of one row's values: the units covering columns [col0, col0 + cols).
  int64_t value_row_bytes() const {
    const int64_t per_unit = format->unit_bits / format->value_bits;
    const auto [a, b] = covering_blocks(col0, col0 + cols, per_unit);
    return (b - a) * (format->unit_bits / 8);
  }
  int64_t scale_bytes() const { return scale_rows() * scale_cols() * format->scale_bytes; }
  // Everything held: values, scales and the global scale (0 for an empty slice).
  int64_t held_bytes() const {
    if (rows <= 0 || cols <= 0) return 0;
    return rows * value_row_bytes() + scale_bytes() + format->global_scale_bytes;
  }
};

// E2M1 (OCP MX FP4): sign, 2 exponent bits (bias 1), 1 mantissa bit; codes 0..7 are 0, 0.5, 1,
// 1.5, 2, 3, 4, 6 and 8..15 their negatives (8 is -0). Exact in f32. REQUIRES: code < 16.
float e2m1_to_f32(uint8_t code);
// UE8M0: 2^(e - 127), e = 0 giving 2^-127 (an f32 subnormal, exact); 0xFF is NaN.
float ue8m0_to_f32(uint8_t e);
// The f32 scale one FP4 group's stored scale byte gives: MXFP4 2^(e - 127); NVFP4
// f32(E4M3 byte) / global_scale (one f32 division, as compressed-tensors dequantises). The
// element is then e2m1 * that scale, one f32 multiply. NaN for a NaN scale byte.
float fp4_group_scale(ScaleKind kind, uint8_t byte, float global_scale);

}  // namespace dayzero
