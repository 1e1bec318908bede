// INT4 weights as compressed-tensors' "pack-quantized" format stores them (Kimi-K2.5, Kimi-K2
// Thinking): a quantized Linear `M` is `M.weight_packed` int32 [out, ceil(in / 8)] (element j of
// a row at bits 4 (j % 8) of word j / 8, stored as q + 8), `M.weight_scale` [out, ceil(in / g)]
// (one scale per group of g inputs) and `M.weight_shape` int32 [2] = [out, in]; the weight is
// q * scale (symmetric, no zero point). Parses quantization_config, dequantizes to F32 on load
// (whole or one rank's rows / columns) or keeps words and scales as stored for the CPU's INT4
// kernels, packs F32 weights for test checkpoints. Not activation
// quantization, not the other compressed-tensors formats (int-quantized, float-quantized, ...).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/compressed_tensors.h"
#include "checkpoint/load.h"
#include "checkpoint/reader.h"
#include "core/status.h"
#include "core/stored_weight.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

// The format's parameters and the ignore list (compressed_tensors.h: quantizes(module)).
struct PackQuant : IgnoreList {
  int bits = 4;
  int64_t group_size = 32;

  int64_t words(int64_t in) const { return (in * bits + 31) / 32; }
  int64_t groups(int64_t in) const { return (in + group_size - 1) / group_size; }
};

// quantization_config of `config` (the object holding it; `where` prefixes messages, e.g.
// "config.json text_config"). nullopt when absent or null. Accepted: quant_method
// "compressed-tensors", format "pack-quantized" (top level or the group's), quantization_status
// compressed (or absent), one config group targeting ["Linear"] whose weights are
// {num_bits 4, type int, symmetric, strategy group, group_size > 0, dynamic false, actorder
// null}, no input/output activation or kv-cache scheme. Anything else is Unsupported naming the
// key and value (another quant_method too: callers with their own formats check first);
// InvalidArgument for values of the wrong type and for an ignore "re:" pattern that does not
// compile.
Result<std::optional<PackQuant>> parse_pack_quant(const nlohmann::json& config, const std::string& where);

// Companion names of the Linear module `module` ("<module>.weight_packed", ...).
std::string packed_name(const std::string& module);
std::string group_scale_name(const std::string& module);
std::string weight_shape_name(const std::string& module);

// Dequantizes module's weight [out, in] to F32: whole (dim -1) or indices [begin, end) of dim 0
// (rows: only those rows of packed and scale are read) or dim 1 (columns: per row only the
// words and scale groups covering them). Values are exactly f32(q) * f32(scale).
// rec (may be null) is overwritten: name is module + ".weight", dtype I32, ranges / bytes_read
// / reads / checksum of the packed words read, shape the result's, aux_bytes_read the scale
// and weight_shape bytes. Validated before the packed words are read; errors name the tensor
// and its file: NotFound (a companion missing), InvalidArgument (a dtype other than I32 for
// packed / weight_shape or F32/BF16/F16 for the scale; a shape other than the expected one;
// weight_shape's values not [out, in]; a bad dim or range), plus ByteReader's.
Result<Tensor> load_pack_quantized_f32(const Catalog& catalog, const std::string& module, const PackQuant& quant,
                                       int64_t out, int64_t in, ByteReader& reader, WeightRecord* rec, int dim = -1,
                                       int64_t begin = 0, int64_t end = 0);

// The same weight (or slice) as stored, for the CPU's INT4 kernels (kernels/ops.h StoredWeight):
// values U8 [rows, 4 x the int32 words covering the columns], each row's nibbles from the slice's
// first column on (as q + 8, two a byte, low nibble first; moved down when the slice starts
// inside a byte or word, zero after its last), scale BF16 [rows, groups covering the columns] as
// stored, slice the int4-pack row in groups of quant.group_size (core/stored_weight.h). Its
// elements' values are the dequantising load's, bit for bit; the same validation, errors and
// record (NaN and infinity counts of those values), and InvalidArgument when the scales are not
// BF16 (F16 and F32 scales are dequantised on load: plan::kept_dtype).
Result<StoredWeightSlice> load_pack_quantized_as_stored(const Catalog& catalog, const std::string& module,
                                                        const PackQuant& quant, int64_t out, int64_t in,
                                                        ByteReader& reader, WeightRecord* rec, int dim = -1,
                                                        int64_t begin = 0, int64_t end = 0);

// Quantizes w [rows, cols] as compressed-tensors' minmax observer does: per group, scale =
// amax / 7.5 (BF16-rounded; 1 for an all-zero group), q = clamp(round_half_even(w / scale),
// -8, 7). Returns packed words [rows, words(cols)] and BF16 scales [rows, groups(cols)].
// REQUIRES: quant.bits == 4.
struct PackedWeight {
  std::vector<int32_t> packed;
  std::vector<uint16_t> scale_bf16;
};
PackedWeight pack_quantize(const float* w, int64_t rows, int64_t cols, const PackQuant& quant);

}  // namespace dayzero::checkpoint
