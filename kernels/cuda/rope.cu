// Rotary embedding on the device, HF rotate-half, in place: one thread per (token, head, pair).
// The angle is the f32 product position * inv_freq and its cos/sin are evaluated in f64 and
// rounded once, as the CPU twin does, so long positions agree. YaRN, NTK and llama3 scaling
// live in inv_freq (and YaRN's attention factor in the caller's scale), not here.
#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::grid_for;
using detail::kThreads;
using detail::launch_status;

namespace {

__global__ void rope_kernel(int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
                            const float* inv_freq, float* x) {
  const int64_t half = head_dim / 2;
  const int64_t n = n_tokens * n_head * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, t = th / n_head;
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    float* v = x + th * head_dim;  // [head_dim] of (t, h)
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

}  // namespace

Status rope_rotate_half(int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
                        const float* inv_freq, float* x, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    return Status::InvalidArgument("cuda rope: head_dim " + std::to_string(head_dim) + " must be even");
  const int64_t n = n_tokens * n_head * (head_dim / 2);
  if (n <= 0) return Status::Ok();
  rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(n_tokens, n_head, head_dim, positions, inv_freq, x);
  return launch_status("rope");
}

}  // namespace dayzero::kernels::cuda
