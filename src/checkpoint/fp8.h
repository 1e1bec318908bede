// Block-quantized FP8 weights (DeepSeek-V3, Kimi-K2; transformers' "fp8" quant_method): loads
// an F8 `X.weight` [out, in] (or one rank's slice of it) with its F32 `X.weight_scale_inv`
// [ceil(out/br), ceil(in/bc)] and dequantizes to F32; parses quantization_config; quantizes
// F32 weights the same way for test checkpoints. Not per-tensor or activation quantization.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/load.h"
#include "checkpoint/reader.h"
#include "core/status.h"
#include "core/stored_weight.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

inline constexpr float kF8E4M3Max = 448.0f;

// Each scale covers block_rows x block_cols weights; the last block of a dimension is partial
// when the block size does not divide it.
struct BlockQuant {
  int64_t block_rows = 128, block_cols = 128;
  // Scales as UE8M0 (DeepSeek-V4's `.scale` tensors, F8_E8M0): powers of two only.
  bool pow2_scales = false;
};

// Reads config.json's quantization_config. Success: nullopt when the key is absent or null (an
// unquantized checkpoint); otherwise the block size of {quant_method: "fp8", fmt: "e4m3"|"e5m2"
// (optional), weight_block_size: [rows, cols], activation_scheme: "dynamic" (optional)}.
// Errors (each names the key and the value): Unsupported for another quant_method, fmt or
// activation_scheme, and for fp8 without weight_block_size (per-tensor scales);
// InvalidArgument for a quantization_config that is not an object, a missing or non-string
// quant_method, or a weight_block_size that is not two positive integers.
Result<std::optional<BlockQuant>> parse_block_quant(const nlohmann::json& config);

// Dequantizes weight_name (F8_E4M3 or F8_E5M2, 2-D [out, in]) with scale_name (F32 or BF16,
// [ceil(out / block_rows), ceil(in / block_cols)]): out[i][j] = f32(w[i][j]) * scale[i/br][j/bc],
// one f32 multiply (one rounding) per element, as transformers and DeepSeek's weight_dequant do.
// dim -1 loads the whole tensor (begin, end ignored); dim 0 or 1 loads indices [begin, end) of
// that dimension, reading only those bytes of the weight (as load_slice_f32) and only the scale
// blocks that cover them. Slice bounds need not be block-aligned.
// rec (may be null) is overwritten with the weight's record: name, file, dtype, ranges,
// bytes_read, reads and checksum are of the F8 bytes read; shape is the result's; nan_count and
// inf_count count the dequantized values; aux_bytes_read is the scale bytes read.
// Everything is validated before any byte is read. Errors, each naming the tensor and its file:
// NotFound: no weight; no scale (names the weight, the scale and the weight's file).
// InvalidArgument: weight not F8 or not 2-D; scale not F32/BF16; scale shape not the expected
//   one (names both shapes); block sizes not positive; bad dim or range (as load_slice_f32).
// Plus those of load_slice_f32 (I/O, out of memory).
Result<Tensor> load_fp8_dequant_f32(const Catalog& catalog, const std::string& weight_name,
                                    const std::string& scale_name, const BlockQuant& quant,
                                    ByteReader& reader, WeightRecord* rec, int dim = -1, int64_t begin = 0,
                                    int64_t end = 0, size_t staging_bytes = kDefaultStagingBytes);

// The same read as load_fp8_dequant_f32 (same checks, errors, bytes read and record: its
// nan_count and inf_count count the dequantised values), but the slice is returned as stored,
// with the scale blocks that cover it, instead of dequantised: values F8_E4M3 / F8_E5M2 [rows,
// cols], scale f32 (widened from BF16 or UE8M0) [the blocks covering the slice], slice the
// fp8-block row placed where the slice starts (core/stored_weight.h).
Result<StoredWeightSlice> load_fp8_as_stored(const Catalog& catalog, const std::string& weight_name,
                                       const std::string& scale_name, const BlockQuant& quant, ByteReader& reader,
                                       WeightRecord* rec, int dim = -1, int64_t begin = 0, int64_t end = 0,
                                       size_t staging_bytes = kDefaultStagingBytes);

// f32 -> OCP E4M3FN byte: round to nearest even, saturating at +-448 (infinities included);
// NaN -> 0x7f with the sign bit of v.
uint8_t f32_to_f8_e4m3_sat(float v);

// Quantizes w [rows, cols] as DeepSeek's FP8 checkpoints are made: per block, scale_inv =
// amax / 448 over its finite |w| (1 when amax is 0; with pow2_scales the power of two at or
// above it, as UE8M0 holds it), and byte = E4M3(w / scale_inv).
// Returns (E4M3 bytes [rows, cols], scale_inv [ceil(rows / br), ceil(cols / bc)]), row-major.
// REQUIRES: rows, cols >= 0; positive block sizes; w holds rows * cols floats.
std::pair<std::vector<uint8_t>, std::vector<float>> quantize_fp8_blocks(const float* w, int64_t rows,
                                                                        int64_t cols, const BlockQuant& quant);

}  // namespace dayzero::checkpoint
