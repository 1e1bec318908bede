// The bounds of a device backend's two GEMM workspaces, from the weights it placed: host code,
// so that the sizing is tested on the CPU (the CUDA backend allocates what it says). Not the
// allocation (cuda_backend.cpp) nor the plan's memory model (plan/memory.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace dayzero::backend {

// bounds(max_tokens):
//   weight_bytes:     the largest weight matmul converts before its GEMM (every weight kept as stored; a
//                     bf16 weight under f32 compute), rows x in-features x the GEMM element size
//                     (2 under bf16 compute, 4 under f32): one Linear at a time;
//   activation_bytes: under bf16 compute, max_tokens x the widest in-features of the weights
//                     GEMM'd in bf16 x 2 (x rounded to bf16 once per call); 0 under f32 compute.
// In-features of a weight [out, ...] are numel / out (a conv patch weight reshaped to a matrix).
class GemmWorkspaceBounds {
 public:
  // REQUIRES: compute is kBF16 or kF32.
  explicit GemmWorkspaceBounds(DType compute) : compute_(compute) {}

  // A weight of `shape` kept as `kept` (BF16 or F32); vectors (rank < 2) need nothing.
  void note_weight(const Shape& shape, DType kept);
  // A weight slice kept as stored [rows, cols]: dequantised into the weight workspace before each GEMM.
  void note_stored(int64_t rows, int64_t cols);

  struct Bytes {
    int64_t weight = 0, activation = 0;
  };
  Bytes bounds(int64_t max_tokens) const;

 private:
  DType compute_;
  int64_t max_convert_elems_ = 0;  // the largest weight converted before its GEMM
  int64_t max_bf16_in_ = 0;        // the widest in-features of a GEMM with bf16 inputs
};

}  // namespace dayzero::backend
