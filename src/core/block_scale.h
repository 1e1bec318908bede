// The byte rule of a block-scaled FP8 weight kept as stored: one byte per element plus one f32
// scale per block that covers the slice held. The planner (plan/memory.h held_bytes), the FP8
// loader (checkpoint/fp8.h) and the CUDA backend's allocation all count with these functions,
// so the plan's per-rank weight bytes and the device's allocation cannot drift apart.
// Not the dequantisation itself (checkpoint/fp8.cpp on the host, kernels/cuda/convert.cu).
#pragma once

#include <cstdint>
#include <utility>

namespace dayzero {

// Element size of a block scale (f32, whatever the checkpoint stores: BF16 scales are widened).
inline constexpr int64_t kBlockScaleBytes = 4;

// The blocks of size `block` that cover indices [begin, end) of one dimension, as the block
// index range [first, last); an empty range is covered by no block (first == last).
// REQUIRES: block > 0, 0 <= begin.
inline std::pair<int64_t, int64_t> covering_blocks(int64_t begin, int64_t end, int64_t block) {
  if (end <= begin) return {begin / block, begin / block};
  return {begin / block, (end - 1) / block + 1};
}

// The slice [row0, row0 + rows) x [col0, col0 + cols) of a weight quantized in blocks of
// block_rows x block_cols (row0, col0: its position in the whole tensor).
struct BlockScaledSlice {
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t block_rows = 128, block_cols = 128;

  // Scale blocks that cover the slice: [scale_rows(), scale_cols()].
  int64_t scale_rows() const {
    const auto [a, b] = covering_blocks(row0, row0 + rows, block_rows);
    return b - a;
  }
  int64_t scale_cols() const {
    const auto [a, b] = covering_blocks(col0, col0 + cols, block_cols);
    return b - a;
  }
  int64_t scale_bytes() const { return scale_rows() * scale_cols() * kBlockScaleBytes; }
  // What a device holds of it kept as stored: rows x cols bytes and the covering scales.
  int64_t device_bytes() const { return rows * cols + scale_bytes(); }
};

}  // namespace dayzero
