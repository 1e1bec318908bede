// RMSNorm and LayerNorm on the device: one block per row, the row's reduction over the block
// (f32 for RMSNorm as HF LlamaRMSNorm, f64 for LayerNorm as the CPU twin), then the scale.
#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::launch_status;
using detail::load;

namespace {

__global__ void rmsnorm_kernel(int64_t width, const float* x, bool bf16, const void* w, float eps, float* y) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * width;  // [width]
  float* yr = y + blockIdx.x * width;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) ss += xr[i] * xr[i];
  ss = detail::block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) yr[i] = load(w, i, bf16) * (xr[i] * inv);
}

__global__ void layernorm_kernel(int64_t width, const float* x, bool bf16, const void* w, const void* b, float eps,
                                 float* y) {
  __shared__ double scratch[32];
  const float* xr = x + blockIdx.x * width;  // [width]
  float* yr = y + blockIdx.x * width;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += xr[i];
  const double mean = detail::block_sum(sum, scratch) / static_cast<double>(width);
  double var = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
  var = detail::block_sum(var, scratch);
  const double inv = 1.0 / sqrt(var / static_cast<double>(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = static_cast<float>((xr[i] - mean) * inv) * load(w, i, bf16);
    yr[i] = b ? v + load(b, i, bf16) : v;
  }
}

}  // namespace

Status rmsnorm(int64_t rows, int64_t width, const float* x, Elem w_elem, const void* w, float eps, float* y,
               cudaStream_t stream) {
  if (width <= 0 || rows < 0) return Status::InvalidArgument("cuda rmsnorm: width " + std::to_string(width));
  if (rows == 0) return Status::Ok();
  rmsnorm_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(width, x, w_elem == Elem::kBF16, w, eps, y);
  return launch_status("rmsnorm");
}

Status layernorm(int64_t rows, int64_t width, const float* x, Elem wb_elem, const void* w, const void* b,
                 float eps, float* y, cudaStream_t stream) {
  if (width <= 0 || rows < 0) return Status::InvalidArgument("cuda layernorm: width " + std::to_string(width));
  if (rows == 0) return Status::Ok();
  layernorm_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(width, x, wb_elem == Elem::kBF16, w, b, eps, y);
  return launch_status("layernorm");
}

}  // namespace dayzero::kernels::cuda
