// FP4 weights (E2M1, two a byte, low nibble first) with one scale byte per group of inputs, in
// the layouts published checkpoints use: MXFP4 (UE8M0 scale per 32, the OCP MX spec) and NVFP4
// (FP8 E4M3 scale per 16 over a per-tensor f32 global scale). Validates a weight's tensors
// against the header, reads one rank's rows or columns, keeps them as stored (for the CPU's FP4
// kernels, kernels/ops.h StoredWeight) or dequantises them to F32, and quantizes F32 weights for
// test checkpoints. The format itself is a row of core/stored_format.h; this file only knows
// where the layouts put its bytes. Not activation quantization.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/compressed_tensors.h"
#include "checkpoint/load.h"
#include "checkpoint/reader.h"
#include "checkpoint/stored.h"
#include "core/status.h"
#include "core/stored_format.h"
#include "core/stored_weight.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

// Where the published layouts put one FP4 Linear weight [out, in] (checkpoint/stored.h
// StoredLayout, its format mxfp4 or nvfp4):
//  - compressed-tensors mxfp4-pack-quantized / nvfp4-pack-quantized: M.weight_packed U8
//    [out, in / 2], M.weight_scale [out, in / g] (MXFP4: U8 or F8_E8M0; NVFP4: F8_E4M3) and,
//    NVFP4 only, M.weight_global_scale F32 [1] (element = e2m1 * scale / global).
//  - gpt-oss fused experts: P_blocks U8 [E, out, in / 32, 16], P_scales U8 [E, out, in / 32],
//    the weight of expert `expert` (P e.g. "model.layers.0.mlp.experts.down_proj").
//  - DeepSeek-V4 routed experts: M.weight I8 or U8 [out, in / 2], M.scale F8_E8M0 (or U8)
//    [out, in / 32].

// The weight of `layout` [out, in], whole (dim -1) or rows [begin, end) (dim 0) or columns
// [begin, end) (dim 1: per row only the bytes and groups covering them), as stored
// (core/stored_weight.h): values U8 [rows, the bytes covering its columns], each row's codes from
// the slice's first column on (moved down a nibble when it starts at an odd column, zero after
// its last); scale U8 [rows, the groups covering the columns], the scale bytes as stored; the
// global scale (NVFP4); its elements have the dequantising load's values. Everything
// is validated before the values are read; errors name the tensor and its file: NotFound (a
// tensor missing), InvalidArgument (a dtype or shape other than the layout's for [out, in] and
// the format's group; an expert index outside the leading dimension; a NaN scale byte (UE8M0
// 0xFF, E4M3 0x7F/0xFF, naming its row and group); a global scale that is not finite and
// positive; a bad dim or range), plus ByteReader's. rec (may be null) is overwritten: name is
// layout.values (with "[expert]" for a fused one), dtype the values', ranges / bytes_read /
// reads / checksum of the value bytes read, shape [rows, cols], nan_count / inf_count of the
// dequantised values, aux_bytes_read the scale and global bytes.
Result<StoredWeightSlice> load_fp4_as_stored(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                       ByteReader& reader, WeightRecord* rec, int dim = -1, int64_t begin = 0,
                                       int64_t end = 0);

// The same read dequantised to F32 [rows, cols]: element = e2m1(code) * fp4_group_scale(scale),
// one f32 multiply (core/stored_format.h), the values the CPU's FP4 kernels give.
Result<Tensor> load_fp4_dequant_f32(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                    ByteReader& reader, WeightRecord* rec, int dim = -1, int64_t begin = 0,
                                    int64_t end = 0);

// compressed-tensors' FP4 formats as config.json's quantization_config names them.
// The format's row and the ignore list (compressed_tensors.h: quantizes(module)).
struct Fp4Quant : IgnoreList {
  StoredScheme scheme = StoredScheme::kMxfp4;
};

// Whether `config`'s quantization_config is compressed-tensors with format
// "mxfp4-pack-quantized" or "nvfp4-pack-quantized" (top level or its one group's).
bool is_fp4_quant_config(const nlohmann::json& config);

// quantization_config of `config` when is_fp4_quant_config, else nullopt (absent, or a format
// other parsers own: fp8, pack-quantized). Accepted: quantization_status compressed (or absent),
// one config group targeting ["Linear"] whose weights are {num_bits 4, type float, symmetric
// true, dynamic false, strategy group with group_size 32 (mxfp4) or tensor_group with group_size
// 16 (nvfp4)}, no activation or kv-cache scheme. Anything else is Unsupported naming the key and
// value; InvalidArgument for values of the wrong type and an ignore pattern that does not compile.
// `where` prefixes messages ("config.json").
Result<std::optional<Fp4Quant>> parse_fp4_quant(const nlohmann::json& config, const std::string& where);

// The quantization_config make-model writes for `scheme` with the given ignore list.
nlohmann::json fp4_quant_config(StoredScheme scheme, const std::vector<std::string>& ignore);

// f32 x as the nearest E2M1 code (ties to even, saturating at +-6; NaN to +6, never produced by
// the quantizer below).
uint8_t f32_to_e2m1(float x);

// Quantizes w [rows, cols] for a test checkpoint. MXFP4: per group of 32, the scale is the power
// of two 2^(floor(log2(amax)) - 2) (OCP MX's rule: emax of E2M1 is 2), codes = E2M1(w / scale);
// NVFP4: global = 448 x 6 / amax(w), per group of 16 the E4M3 scale of amax / 6 x global, codes
// = E2M1(w x global / f32(scale)). Returns packed bytes [rows, ceil(cols / 2)] and scale bytes
// [rows, ceil(cols / g)].
struct Fp4Packed {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scale;
  float global_scale = 1.0f;
};
Fp4Packed fp4_quantize(const float* w, int64_t rows, int64_t cols, StoredScheme scheme);

}  // namespace dayzero::checkpoint
