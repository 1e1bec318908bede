// One rank's slice of a quantized weight as its checkpoint stores it, in host memory: the one
// value every as-stored loader returns (checkpoint/fp8.h, pack_quantized.h, fp4.h) and a
// backend's to_device_stored takes (backend/backend.h), whatever its row of the stored-format
// table (core/stored_format.h). Not the kernels' view of it (kernels/ops.h StoredWeight).
#pragma once

#include <string>

#include "core/stored_format.h"
#include "core/tensor.h"

namespace dayzero {

struct StoredWeightSlice {
  StoredSlice slice;  // the format's row, the slice's place in the whole weight, the block a scale covers
  // [slice.rows, slice.value_row_bytes()]: each row's elements from the slice's column 0 on
  // (fp8-block F8_E4M3 or F8_E5M2 bytes; int4-pack and FP4 U8, two elements a byte).
  Tensor values;
  // [slice.scale_rows(), slice.scale_cols()] as the row holds them: f32 (fp8-block, widened on
  // load), bf16 (int4-pack), U8 (mxfp4 UE8M0, nvfp4 E4M3).
  Tensor scale;
  float global_scale = 1.0f;  // nvfp4's per-tensor divisor

  // The dtype a backend's tensor of it carries: F8_E4M3 / F8_E5M2, I4 or F4 (core/dtype.h).
  DType held_dtype() const;
  // "" when values and scale have the dtypes and shapes slice says, else what differs.
  std::string shape_error() const;
};

// The dtype of a scale as `kind` holds it.
DType scale_dtype(ScaleKind kind);
// Whether t is the dtype of a quantized weight kept as stored (F8_E4M3, F8_E5M2, I4, F4).
bool is_stored_weight_dtype(DType t);

}  // namespace dayzero
