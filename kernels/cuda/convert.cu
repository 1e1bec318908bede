// Dtype conversion on the device: f32 <-> bf16, f16 -> f32/bf16, and the dequantisation of block-scaled FP8
// weights (E4M3FN / E5M2 with f32 scales per block, DeepSeek-V3 and Kimi-K2 layout) into f32
// or bf16. Not the host conversions (core/dtype.h) nor the FP8 loader (checkpoint/fp8.h).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::grid_for;
using detail::kThreads;
using detail::launch_status;

namespace {

__global__ void f32_to_bf16_kernel(int64_t n, const float* x, __nv_bfloat16* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void bf16_to_f32_kernel(int64_t n, const __nv_bfloat16* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

__global__ void f16_to_f32_kernel(int64_t n, const __half* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __half2float(x[i]);
}

__global__ void f16_to_bf16_kernel(int64_t n, const __half* x, __nv_bfloat16* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(__half2float(x[i]));
}

__device__ __forceinline__ float fp8_to_f32(uint8_t v, bool e5m2) {
  if (e5m2) {
    __nv_fp8_e5m2 f;
    f.__x = v;
    return static_cast<float>(f);
  }
  __nv_fp8_e4m3 f;
  f.__x = v;
  return static_cast<float>(f);
}

__global__ void dequant_fp8_kernel(int64_t rows, int64_t cols, const uint8_t* w, bool e5m2, const float* scale,
                                   int64_t scale_cols, int64_t block_rows, int64_t block_cols, int64_t row0,
                                   int64_t col0, bool to_bf16, void* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float s = scale[((row0 + r) / block_rows) * scale_cols + (col0 + c) / block_cols];
    const float v = fp8_to_f32(w[i], e5m2) * s;
    if (to_bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(out)[i] = v;
  }
}

__constant__ float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

__global__ void dequant_fp4_kernel(int64_t rows, int64_t cols, const uint8_t* q, int64_t row_bytes,
                                   const uint8_t* scale, int64_t scale_cols, int64_t group, int64_t col0,
                                   bool e4m3_scale, float global_scale, bool to_bf16, void* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int code = (q[r * row_bytes + c / 2] >> (4 * (c & 1))) & 15;
    const uint8_t sb = scale[r * scale_cols + (col0 + c) / group];
    // 2^(e - 127) exactly (2^-127 is an f32 subnormal); E4M3 over the global scale, rounded once.
    const float s = e4m3_scale ? __fdiv_rn(fp8_to_f32(sb, false), global_scale) : ldexpf(1.0f, int{sb} - 127);
    const float v = __fmul_rn(kE2m1Values[code], s);
    if (to_bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(out)[i] = v;
  }
}

}  // namespace

Status dequant_fp4_groups(int64_t rows, int64_t cols, const uint8_t* q, int64_t row_bytes, const uint8_t* scale,
                          int64_t scale_cols, int64_t group, int64_t col0, bool e4m3_scale, float global_scale,
                          Elem to, void* out, cudaStream_t stream) {
  if (group <= 0 || col0 < 0 || col0 >= group || row_bytes < (cols + 1) / 2 || scale_cols < 0)
    return Status::InvalidArgument("cuda dequant_fp4_groups: groups of " + std::to_string(group) + " from column " +
                                   std::to_string(col0) + ", " + std::to_string(row_bytes) + " bytes a row");
  if (rows <= 0 || cols <= 0) return Status::Ok();
  dequant_fp4_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(rows, cols, q, row_bytes, scale, scale_cols,
                                                                     group, col0, e4m3_scale, global_scale,
                                                                     to == Elem::kBF16, out);
  return launch_status("dequant_fp4_groups");
}

Status convert(int64_t n, Elem from, const void* x, Elem to, void* y, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  if (from == to) {
    const size_t bytes = static_cast<size_t>(n) * (from == Elem::kF32 ? 4 : 2);
    const cudaError_t e = cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return Status::Internal(std::string("cuda convert (copy): ") + cudaGetErrorString(e));
    return Status::Ok();
  }
  if (to == Elem::kF16) return Status::InvalidArgument("cuda convert: no conversion to f16 (no kernel takes it)");
  if (from == Elem::kF16) {
    if (to == Elem::kF32)
      f16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, static_cast<const __half*>(x), static_cast<float*>(y));
    else
      f16_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, static_cast<const __half*>(x),
                                                               static_cast<__nv_bfloat16*>(y));
  } else if (from == Elem::kF32)
    f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, static_cast<const float*>(x),
                                                             static_cast<__nv_bfloat16*>(y));
  else
    bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, static_cast<const __nv_bfloat16*>(x),
                                                             static_cast<float*>(y));
  return launch_status("convert");
}

Status dequant_fp8_blocks(int64_t rows, int64_t cols, const uint8_t* w, bool e5m2, const float* scale,
                          int64_t scale_cols, int64_t block_rows, int64_t block_cols, int64_t row0, int64_t col0,
                          Elem to, void* out, cudaStream_t stream) {
  if (block_rows <= 0 || block_cols <= 0 || scale_cols <= 0 || row0 < 0 || col0 < 0)
    return Status::InvalidArgument("cuda dequant_fp8_blocks: block " + std::to_string(block_rows) + "x" +
                                   std::to_string(block_cols) + ", scale_cols " + std::to_string(scale_cols));
  if (rows <= 0 || cols <= 0) return Status::Ok();
  dequant_fp8_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(rows, cols, w, e5m2, scale, scale_cols,
                                                                     block_rows, block_cols, row0, col0,
                                                                     to == Elem::kBF16, out);
  return launch_status("dequant_fp8_blocks");
}

}  // namespace dayzero::kernels::cuda
