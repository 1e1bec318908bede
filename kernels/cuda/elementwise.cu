// Element-wise CUDA ops of ops.h: add, add_bias, swiglu, the GELU family, embedding gather.
// Grid-stride loops, one element per thread step, f32 math with the CPU twins' formulas.
#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::grid_for;
using detail::kThreads;
using detail::launch_status;
using detail::load;

namespace {

__global__ void add_kernel(int64_t n, bool bf16, const void* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] += load(x, i, bf16);
}

__global__ void add_bias_kernel(int64_t rows, int64_t width, bool bf16, const void* b, float* y) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] += load(b, i % width, bf16);
}

__global__ void swiglu_kernel(int64_t n, const float* gate, const float* up, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void gelu_kernel(int64_t n, int kind, const float* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    float r;
    if (kind == 0) r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    else if (kind == 1) r = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    else r = v / (1.0f + expf(-1.702f * v));
    y[i] = r;
  }
}

__global__ void embedding_kernel(int64_t n_tokens, const int32_t* ids, int64_t n_rows, int64_t width,
                                 int64_t row_offset, bool bf16, const void* table, float* out) {
  const int64_t n = n_tokens * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    const int64_t r = static_cast<int64_t>(ids[t]) - row_offset;
    out[i] = (r >= 0 && r < n_rows) ? load(table, r * width + c, bf16) : 0.0f;
  }
}

}  // namespace

Status add_inplace(int64_t n, Elem x_elem, const void* x, float* y, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x_elem == Elem::kBF16, x, y);
  return launch_status("add");
}

Status add_bias(int64_t rows, int64_t width, Elem b_elem, const void* b, float* y, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return Status::Ok();
  add_bias_kernel<<<grid_for(rows * width), kThreads, 0, stream>>>(rows, width, b_elem == Elem::kBF16, b, y);
  return launch_status("add_bias");
}

Status swiglu(int64_t n, const float* gate, const float* up, float* out, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  swiglu_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, gate, up, out);
  return launch_status("swiglu");
}

Status gelu(int64_t n, int kind, const float* x, float* y, cudaStream_t stream) {
  if (kind < 0 || kind > 2) return Status::InvalidArgument("cuda gelu: unknown kind " + std::to_string(kind));
  if (n <= 0) return Status::Ok();
  gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, kind, x, y);
  return launch_status("gelu");
}

Status embedding(int64_t n_tokens, const int32_t* ids, int64_t n_rows, int64_t width, int64_t row_offset,
                 Elem table_elem, const void* table, float* out, cudaStream_t stream) {
  if (n_tokens <= 0 || width <= 0) return Status::Ok();
  embedding_kernel<<<grid_for(n_tokens * width), kThreads, 0, stream>>>(n_tokens, ids, n_rows, width, row_offset,
                                                                         table_elem == Elem::kBF16, table, out);
  return launch_status("embedding");
}

}  // namespace dayzero::kernels::cuda
