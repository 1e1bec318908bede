// Row softmax and argmax on the device: reductions over a logits row. softmax_rows runs one
// block per row in f32 with max subtraction; argmax runs one block over the row with the
// CPU twin's preference (larger wins, a number beats NaN, the lower index wins ties).
#include <math_constants.h>

#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::launch_status;

namespace {

__global__ void softmax_rows_kernel(int64_t width, float* x) {
  __shared__ float scratch[32];
  float* xr = x + blockIdx.x * width;  // [width]
  float m = -CUDART_INF_F;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = detail::block_max(m, scratch);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += expf(xr[i] - m);
  sum = detail::block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) xr[i] = expf(xr[i] - m) * inv;
}

__device__ __forceinline__ bool prefers(float a, int64_t ia, float b, int64_t ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;                 // a number beats a NaN
  if (!na && a != b) return a > b;         // the larger value
  return ia < ib;                          // equal (or both NaN): the lower index
}

constexpr int kArgmaxThreads = 1024;

__global__ void argmax_kernel(int64_t n, const float* x, int64_t* index) {
  __shared__ float sv[kArgmaxThreads];
  __shared__ int64_t si[kArgmaxThreads];
  float best = CUDART_NAN_F;
  int64_t best_i = n;  // loses to every real candidate
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (prefers(x[i], i, best, best_i)) best = x[i], best_i = i;
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride && prefers(sv[threadIdx.x + stride], si[threadIdx.x + stride], sv[threadIdx.x],
                                        si[threadIdx.x])) {
      sv[threadIdx.x] = sv[threadIdx.x + stride];
      si[threadIdx.x] = si[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *index = si[0];
}

}  // namespace

Status softmax_rows(int64_t rows, int64_t width, float* x, cudaStream_t stream) {
  if (width <= 0 || rows < 0) return Status::InvalidArgument("cuda softmax_rows: width " + std::to_string(width));
  if (rows == 0) return Status::Ok();
  softmax_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(width, x);
  return launch_status("softmax_rows");
}

Status argmax(int64_t n, const float* x, int64_t* index, cudaStream_t stream) {
  if (n <= 0) return Status::InvalidArgument("cuda argmax of an empty row");
  argmax_kernel<<<1, kArgmaxThreads, 0, stream>>>(n, x, index);
  return launch_status("argmax");
}

}  // namespace dayzero::kernels::cuda
