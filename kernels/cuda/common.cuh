// Internal to kernels/cuda: launch-status checking, grid sizing for grid-stride loops, element
// loads of f32/bf16 buffers and block reductions. Not a public header (ops.h is).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/ops.h"

namespace dayzero::kernels::cuda::detail {

// The status of the launch just made, naming the op.
inline Status launch_status(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Internal(std::string("cuda ") + op + ": " + cudaGetErrorString(e));
  return Status::Ok();
}

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (at least one, at most 2^20).
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}

__device__ __forceinline__ float load(const void* p, int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the sum.
// `scratch` holds 32 values; the function synchronizes before returning.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];  // same order on every thread
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < n_warps; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

}  // namespace dayzero::kernels::cuda::detail
