// The byte rule of a block-scaled FP8 weight kept as stored: one byte per element plus one f32
// scale per block that covers the slice held, the fp8-block row of the stored-format table
// (core/stored_format.h), whose held_bytes the planner (plan/memory.h held_bytes), the FP8 loader
// (checkpoint/fp8.h) and the CUDA backend's allocation all count with, so the plan's per-rank
// weight bytes and the device's allocation cannot drift apart.
// Not the dequantisation itself (checkpoint/fp8.cpp on the host, kernels/cuda/convert.cu).
#pragma once

#include <cstdint>
#include <utility>

#include "core/stored_format.h"

namespace dayzero {

// Element size of a block scale (f32, whatever the checkpoint stores: BF16 scales are widened).
inline constexpr int64_t kBlockScaleBytes = 4;

// The slice [row0, row0 + rows) x [col0, col0 + cols) of a weight quantized in blocks of
// block_rows x block_cols (row0, col0: its position in the whole tensor).
struct BlockScaledSlice {
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t block_rows = 128, block_cols = 128;

  StoredSlice stored() const {
    return {&stored_format(StoredScheme::kFp8Block), rows, cols, row0, col0, block_rows, block_cols};
  }
  // Scale blocks that cover the slice: [scale_rows(), scale_cols()].
  int64_t scale_rows() const { return stored().scale_rows(); }
  int64_t scale_cols() const { return stored().scale_cols(); }
  int64_t scale_bytes() const { return stored().scale_bytes(); }
  // What a device holds of it kept as stored: rows x cols bytes and the covering scales.
  int64_t device_bytes() const { return stored().held_bytes(); }
};

}  // namespace dayzero
