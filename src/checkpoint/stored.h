// Where a quantized weight kept as stored is in a checkpoint, whatever its row of the
// stored-format table (core/stored_format.h), and the one reader of any of them: one rank's slice
// as stored (core/stored_weight.h, for a backend's to_device_stored) or dequantised to F32. Each
// format's own reader (fp8.h, pack_quantized.h, fp4.h) validates its tensors against the header
// and decodes its bytes; this file only says which one reads a layout.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/catalog.h"
#include "checkpoint/load.h"
#include "checkpoint/reader.h"
#include "core/status.h"
#include "core/stored_format.h"
#include "core/stored_weight.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

struct StoredLayout {
  const StoredFormat* format = nullptr;
  std::string values;   // fp8-block: the F8 weight; int4-pack: `<module>.weight_packed`; FP4: the codes
  std::string scale;    // the scales
  std::string global;   // nvfp4: the F32 global scale
  int64_t expert = -1;  // an index into a leading experts dimension of values and scale (gpt-oss); -1: none
  int64_t block_rows = 0, block_cols = 0;  // the block one scale covers
};

// The published layouts. compressed-tensors: `<module>.weight_packed`, `.weight_scale` (and
// NVFP4's `.weight_global_scale`; INT4's `.weight_shape` is read beside them), in groups of
// `group` (0: the format's own); the weight under its own name with its scales in `scale`
// (FP8's `_scale_inv`, DeepSeek-V4's `.scale`); gpt-oss's fused `<prefix>_blocks` / `_scales`,
// the weight of expert `expert` (MXFP4).
StoredLayout compressed_tensors_layout(const std::string& module, const StoredFormat& f, int64_t group = 0);
StoredLayout own_name_layout(const std::string& weight, const std::string& scale, const StoredFormat& f,
                             int64_t block_rows, int64_t block_cols);
StoredLayout gpt_oss_fp4_layout(const std::string& prefix, int64_t expert);

// The weight of `layout` [out, in], whole (dim -1) or rows [begin, end) (dim 0) or columns
// [begin, end) (dim 1), as stored: only the bytes and scales covering the slice are read. The
// format's reader's validation, errors (each naming the tensor and its file) and record.
Result<StoredWeightSlice> load_stored(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                      ByteReader& reader, WeightRecord* rec, int dim = -1, int64_t begin = 0,
                                      int64_t end = 0, size_t staging_bytes = kDefaultStagingBytes);
// The same read dequantised to F32 [rows, cols]: element = decode(value) * its block's scale, one
// f32 multiply, the values the backends' kernels give the slice as stored.
Result<Tensor> load_stored_dequant_f32(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                       ByteReader& reader, WeightRecord* rec, int dim = -1, int64_t begin = 0,
                                       int64_t end = 0, size_t staging_bytes = kDefaultStagingBytes);

}  // namespace dayzero::checkpoint
