// Attention on the device: one warp per (token, query head), one pass over the keys with an
// online softmax (running max, rescaled sum and accumulator) in f32. Each lane owns head_dim/32
// dimensions of q and of the output; a key's score is the warp's sum of the lanes' partial dot
// products. Simple and exact in structure rather than fast (no tiling through shared memory);
// the same kernel serves causal GQA over a KV cache (and MLA's padded heads) and an encoder's
// unmasked attention.
#include <math_constants.h>

#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::launch_status;

namespace {

constexpr int kWarpsPerBlock = 4;

// DPL: dimensions per lane, head_dim <= 32 * DPL.
template <int DPL>
__global__ void attention_kernel(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                 int64_t n_kv_rows, bool causal, int64_t pos0, const float* q, const float* k,
                                 const float* v, float scale, float* out) {
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= n_tokens * n_head) return;  // uniform over the warp: blockDim is a multiple of 32
  const int64_t t = warp / n_head, h = warp % n_head;
  const int64_t kvh = h / (n_head / n_head_kv);
  const float* qr = q + (t * n_head + h) * head_dim;  // [head_dim]
  float qv[DPL], acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    qv[j] = d < head_dim ? qr[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int64_t n_keys = causal ? pos0 + t + 1 : n_kv_rows;
  float m = -CUDART_INF_F, l = 0.0f;
  for (int64_t r = 0; r < n_keys; ++r) {
    const float* kr = k + (r * n_head_kv + kvh) * head_dim;  // [head_dim]
    const float* vr = v + (r * n_head_kv + kvh) * head_dim;
    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < head_dim) part += qv[j] * kr[d];
    }
    for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
    const float s = part * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 at the first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < head_dim) acc[j] = acc[j] * corr + p * vr[d];
    }
    m = m_new;
  }
  float* o = out + (t * n_head + h) * head_dim;
  const float inv = 1.0f / l;
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < head_dim) o[d] = acc[j] * inv;
  }
}

template <int DPL>
void launch(unsigned blocks, cudaStream_t stream, int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
            int64_t head_dim, int64_t n_kv_rows, bool causal, int64_t pos0, const float* q, const float* k,
            const float* v, float scale, float* out) {
  attention_kernel<DPL><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(n_tokens, n_head, n_head_kv, head_dim,
                                                                    n_kv_rows, causal, pos0, q, k, v, scale, out);
}

}  // namespace

Status attention(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_kv_rows,
                 bool causal, int64_t pos0, const float* q, const float* k, const float* v, float scale,
                 float* out, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kAttentionMaxHeadDim)
    return Status::Unsupported("cuda attention: head_dim " + std::to_string(head_dim) + " (at most " +
                               std::to_string(kAttentionMaxHeadDim) + ")");
  if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0)
    return Status::InvalidArgument("cuda attention: n_head " + std::to_string(n_head) + " is not a multiple of " +
                                   std::to_string(n_head_kv) + " kv heads");
  if (causal ? pos0 < 0 || pos0 + n_tokens > n_kv_rows : n_kv_rows <= 0)
    return Status::InvalidArgument("cuda attention: " + std::to_string(n_tokens) + " tokens at " +
                                   std::to_string(pos0) + " over " + std::to_string(n_kv_rows) + " cache rows");
  if (n_tokens <= 0) return Status::Ok();
  const int64_t warps = n_tokens * n_head;
  const unsigned blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (head_dim <= 32) launch<1>(blocks, stream, n_tokens, n_head, n_head_kv, head_dim, n_kv_rows, causal, pos0, q, k, v, scale, out);
  else if (head_dim <= 64) launch<2>(blocks, stream, n_tokens, n_head, n_head_kv, head_dim, n_kv_rows, causal, pos0, q, k, v, scale, out);
  else if (head_dim <= 128) launch<4>(blocks, stream, n_tokens, n_head, n_head_kv, head_dim, n_kv_rows, causal, pos0, q, k, v, scale, out);
  else launch<8>(blocks, stream, n_tokens, n_head, n_head_kv, head_dim, n_kv_rows, causal, pos0, q, k, v, scale, out);
  return launch_status("attention");
}

}  // namespace dayzero::kernels::cuda
