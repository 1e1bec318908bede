// MoE router top-k on the device, one block per token: the scores in parallel, the sums that
// the CPU twin (kernels/cpu/router.cpp) takes in index order on one thread in the same order,
// and the top-k as k rounds of a block arg-max under the tie rule of router.h. Not the
// experts' dispatch (the MoE block gathers each expert's tokens on the host).
#include <math_constants.h>

#include "kernels/cuda/common.cuh"

namespace dayzero::kernels::cuda {
using detail::launch_status;

namespace {

constexpr int kRouterThreads = 256;

// The tie rule: a larger score first; equal scores, the lower index.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// Index of the best not-taken v[0 .. n) under `better`, the same on every thread; -1 if all are
// taken. `better` is a strict total order on (value, index) pairs, so the reduction order does
// not change the result. s_v, s_i: 32 slots of shared scratch.
__device__ int block_pick(int n, const float* v, const unsigned char* taken, float* s_v, int* s_i) {
  float bv = 0;
  int bi = -1;
  for (int e = threadIdx.x; e < n; e += blockDim.x)
    if (!taken[e] && (bi < 0 || better(v[e], e, bv, bi))) bv = v[e], bi = e;
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, bv, off);
    const int oi = __shfl_down_sync(0xffffffffu, bi, off);
    if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) bv = ov, bi = oi;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();  // the scratch may still be read by the previous call
  if (lane == 0) s_v[warp] = bv, s_i[warp] = bi;
  __syncthreads();
  float wv = 0;
  int wi = -1;
  for (int w = 0; w < n_warps; ++w)
    if (s_i[w] >= 0 && (wi < 0 || better(s_v[w], s_i[w], wv, wi))) wv = s_v[w], wi = s_i[w];
  return wi;
}

// k rounds of block_pick over v[n]; the chosen ids go to sel[k] (shared). Leaves taken set.
__device__ void block_topk(int n, int k, const float* v, unsigned char* taken, int* sel, float* s_v, int* s_i) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) taken[e] = 0;
  __syncthreads();
  for (int j = 0; j < k; ++j) {
    const int w = block_pick(n, v, taken, s_v, s_i);
    if (threadIdx.x == 0) {
      sel[j] = w;
      taken[w] = 1;
    }
    __syncthreads();
  }
}

// exp in f64, rounded once to f32 (the CPU's expf is within 0.502 ulp of this).
__device__ __forceinline__ float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// Dynamic shared memory: p [n_expert] f32, taken [n_expert] bytes.
__global__ void route_softmax_kernel(int n_expert, int k, bool renormalize, const float* logits, int32_t* ids,
                                     float* weights) {
  extern __shared__ float smem[];
  float* p = smem;                                                     // [n_expert]
  auto* taken = reinterpret_cast<unsigned char*>(smem + n_expert);     // [n_expert]
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ int sel[kRouterMaxK];
  __shared__ float z;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_expert;
  float m = -CUDART_INF_F;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) m = fmaxf(m, row[e]);
  m = detail::block_max(m, s_v);
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) p[e] = exp_f32(row[e] - m);
  __syncthreads();
  if (threadIdx.x == 0) {  // in expert order, as the CPU twin
    float sum = 0;
    for (int e = 0; e < n_expert; ++e) sum += p[e];
    z = sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) p[e] = p[e] / z;
  __syncthreads();
  block_topk(n_expert, k, p, taken, sel, s_v, s_i);
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += p[sel[j]];
    const int64_t o = static_cast<int64_t>(blockIdx.x) * k;
    for (int j = 0; j < k; ++j) {
      ids[o + j] = sel[j];
      weights[o + j] = renormalize ? p[sel[j]] / sum : p[sel[j]];
    }
  }
}

// Dynamic shared memory: score, choice (masked in place once the groups are chosen)
// [n_expert] f32, group_score [n_group] f32, taken [n_expert] and group_taken [n_group] bytes.
__global__ void route_sigmoid_group_kernel(int n_expert, int k, int n_group, int topk_group, bool renormalize,
                                           float scaling, const float* logits, bool bias_bf16, const void* bias,
                                           int32_t* ids, float* weights) {
  extern __shared__ float smem[];
  float* score = smem;                     // [n_expert]
  float* choice = score + n_expert;        // [n_expert]
  float* group_score = choice + n_expert;  // [n_group]
  auto* taken = reinterpret_cast<unsigned char*>(group_score + n_group);  // [n_expert]
  unsigned char* group_taken = taken + n_expert;                          // [n_group]
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ int sel[kRouterMaxK];
  const int per_group = n_expert / n_group;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_expert;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    const float s = 1.0f / (1.0f + exp_f32(-row[e]));
    score[e] = s;
    choice[e] = s + (bias ? detail::load(bias, e, bias_bf16) : 0.0f);
  }
  __syncthreads();
  for (int g = threadIdx.x; g < n_group; g += blockDim.x) {  // as the CPU twin: strict >, in index order
    const float* c = choice + g * per_group;
    float best = -CUDART_INF_F, second = -CUDART_INF_F;
    for (int i = 0; i < per_group; ++i) {
      if (c[i] > best) {
        second = best;
        best = c[i];
      } else if (c[i] > second) {
        second = c[i];
      }
    }
    group_score[g] = per_group >= 2 ? best + second : best;
  }
  __syncthreads();
  // The kept groups (sel is free until the experts are chosen), then the other groups masked.
  block_topk(n_group, topk_group, group_score, group_taken, sel, s_v, s_i);
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
    if (!group_taken[e / per_group]) choice[e] = -CUDART_INF_F;
  __syncthreads();
  block_topk(n_expert, k, choice, taken, sel, s_v, s_i);
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += score[sel[j]];
    const int64_t o = static_cast<int64_t>(blockIdx.x) * k;
    for (int j = 0; j < k; ++j) {
      ids[o + j] = sel[j];
      const float w = renormalize ? score[sel[j]] / (sum + 1e-20f) : score[sel[j]];
      weights[o + j] = w * scaling;
    }
  }
}

Status check_sizes(const char* op, int64_t n_tokens, int64_t n_expert, int64_t k) {
  if (n_tokens < 0 || n_expert < 1 || n_expert > kRouterMaxExperts || k < 1 || k > n_expert || k > kRouterMaxK ||
      n_tokens > int64_t{0x7fffffff})
    return Status::InvalidArgument(std::string("cuda ") + op + ": " + std::to_string(n_tokens) + " tokens, " +
                                   std::to_string(n_expert) + " experts (at most " +
                                   std::to_string(kRouterMaxExperts) + "), k " + std::to_string(k) + " (at most " +
                                   std::to_string(kRouterMaxK) + ")");
  return Status::Ok();
}

}  // namespace

Status route_softmax_topk(int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize, const float* logits,
                          int32_t* ids, float* weights, cudaStream_t stream) {
  DZ_RETURN_IF_ERROR(check_sizes("route_softmax_topk", n_tokens, n_expert, k));
  if (n_tokens == 0) return Status::Ok();
  const size_t smem = static_cast<size_t>(n_expert) * (sizeof(float) + 1);
  route_softmax_kernel<<<static_cast<unsigned>(n_tokens), kRouterThreads, smem, stream>>>(
      static_cast<int>(n_expert), static_cast<int>(k), renormalize, logits, ids, weights);
  return launch_status("route_softmax_topk");
}

Status route_sigmoid_group_topk(int64_t n_tokens, int64_t n_expert, int64_t k, int64_t n_group, int64_t topk_group,
                                bool renormalize, float scaling, const float* logits, Elem bias_elem,
                                const void* bias, int32_t* ids, float* weights, cudaStream_t stream) {
  DZ_RETURN_IF_ERROR(check_sizes("route_sigmoid_group_topk", n_tokens, n_expert, k));
  if (n_group < 1 || n_group > kRouterMaxGroups || n_expert % n_group != 0 || topk_group < 1 ||
      topk_group > n_group || topk_group > kRouterMaxK || k > topk_group * (n_expert / n_group))
    return Status::InvalidArgument("cuda route_sigmoid_group_topk: " + std::to_string(n_expert) + " experts in " +
                                   std::to_string(n_group) + " groups (at most " + std::to_string(kRouterMaxGroups) +
                                   "), " + std::to_string(topk_group) + " kept, k " + std::to_string(k));
  if (n_tokens == 0) return Status::Ok();
  const size_t smem = static_cast<size_t>(2 * n_expert + n_group) * sizeof(float) + static_cast<size_t>(n_expert + n_group);
  route_sigmoid_group_kernel<<<static_cast<unsigned>(n_tokens), kRouterThreads, smem, stream>>>(
      static_cast<int>(n_expert), static_cast<int>(k), static_cast<int>(n_group), static_cast<int>(topk_group),
      renormalize, scaling, logits, bias_elem == Elem::kBF16, bias, ids, weights);
  return launch_status("route_sigmoid_group_topk");
}

}  // namespace dayzero::kernels::cuda
