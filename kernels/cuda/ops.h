// The CUDA twins of kernels/ops.h: the same contracts on device buffers, enqueued on `stream`
// (nothing here synchronizes). Each returns the launch status naming the op ("cuda rmsnorm:
// invalid configuration argument"); errors of the kernel itself surface at the next
// synchronisation. Row-major, PyTorch layouts; shapes in the comments. Not the backend (which
// owns buffers, streams and handles: src/backend/cuda_backend.cpp) and not the GEMM (gemm.h).
// Every op is checked against its CPU twin in tests/unit/cuda/cuda_kernels_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace dayzero::kernels::cuda {

// Element types a device buffer may hold (a subset of core/dtype.h's): activations are f32;
// weights f32 or bf16; FP8 weights with f32 block scales. kF16 only as the source of convert
// (an F16 checkpoint's weights as they cross PCIe); no other op takes it.
enum class Elem : int { kF32, kBF16, kF16 };

// y[n] = convert(x[n]): f32 -> bf16 (round to nearest even, NaN stays NaN), bf16 -> f32, f16 ->
// f32 (exact) or f16 -> bf16 (through f32: the same bits as widening on the host first), or a
// copy when from == to. InvalidArgument for a conversion to f16.
Status convert(int64_t n, Elem from, const void* x, Elem to, void* y, cudaStream_t stream);

// out[rows, cols] = f32(w[i][j]) * scale[i / block_rows][j / block_cols], written as `to`
// (f32 or bf16: one f32 multiply, then one rounding). w: F8_E4M3FN (e5m2 false) or F8_E5M2
// bytes [rows, cols]; scale f32 [ceil(rows / block_rows), ceil(cols / block_cols)].
// col0: the first column of the slice held (a column-split shard reads scale blocks from its
// global column index col0 + j); row0 likewise for a row-split shard.
Status dequant_fp8_blocks(int64_t rows, int64_t cols, const uint8_t* w, bool e5m2, const float* scale,
                          int64_t scale_cols, int64_t block_rows, int64_t block_cols, int64_t row0, int64_t col0,
                          Elem to, void* out, cudaStream_t stream);

// out[rows, cols] = e2m1(code of q[i][j]) * group scale, written as `to` (f32 or bf16: one f32
// multiply, then one rounding), the CPU's dequantise_stored_rows (kernels/ops.h StoredWeight): q the
// E2M1 codes two a byte, low nibble first, row i at q + i * row_bytes; scale the scale bytes
// [rows, scale_cols] of the groups of `group` columns covering the slice, the first holding its
// column 0; col0: the slice's first column modulo group. Group scale: 2^(byte - 127) (e4m3_scale
// false: MXFP4) or f32(E4M3 byte) / global_scale (NVFP4, one f32 division).
Status dequant_fp4_groups(int64_t rows, int64_t cols, const uint8_t* q, int64_t row_bytes, const uint8_t* scale,
                          int64_t scale_cols, int64_t group, int64_t col0, bool e4m3_scale, float global_scale,
                          Elem to, void* out, cudaStream_t stream);

// y[n] += x[n]; x f32 or bf16 (a weight, e.g. a position embedding), y f32.
Status add_inplace(int64_t n, Elem x_elem, const void* x, float* y, cudaStream_t stream);
// y[rows, width] += b[width]; b f32 or bf16.
Status add_bias(int64_t rows, int64_t width, Elem b_elem, const void* b, float* y, cudaStream_t stream);

// out[n] = silu(gate[n]) * up[n]
Status swiglu(int64_t n, const float* gate, const float* up, float* out, cudaStream_t stream);

// The GELU family of kernels::cpu::GeluKind: 0 erf, 1 tanh approximation, 2 quick_gelu. y may alias x.
Status gelu(int64_t n, int kind, const float* x, float* y, cudaStream_t stream);

// y[rows, width] = x / sqrt(mean(x^2) + eps) * w; w f32 or bf16 [width]. f32 math.
Status rmsnorm(int64_t rows, int64_t width, const float* x, Elem w_elem, const void* w, float eps, float* y,
               cudaStream_t stream);
// y[rows, width] = (x - mean) / sqrt(var + eps) * w (+ b); biased variance, f64 reductions;
// w, b f32 or bf16 [width], b may be null.
Status layernorm(int64_t rows, int64_t width, const float* x, Elem wb_elem, const void* w, const void* b,
                 float eps, float* y, cudaStream_t stream);

// x[n_tokens, n_head, head_dim] rotated in place, HF rotate-half: pairs (i, i + d/2) with angle
// f32(positions[t] * inv_freq[i]), cos/sin in f64 rounded once (as the CPU twin). inv_freq
// [head_dim / 2] already carries the schedule (YaRN, NTK, llama3); positions int32 [n_tokens].
Status rope_rotate_half(int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
                        const float* inv_freq, float* x, cudaStream_t stream);

// Attention, one warp per (token, head), single pass with an online softmax in f32.
//   q   [n_tokens, n_head, head_dim]
//   k,v [n_kv_rows, n_head_kv, head_dim]   (a KV cache, or the tokens themselves)
//   out [n_tokens, n_head, head_dim]
// causal: token t attends to rows 0 .. pos0 + t (GQA over a cache; MLA uses it with its
// padded per-head keys); otherwise every token attends to rows 0 .. n_kv_rows - 1 (encoders).
// Head h reads kv head h / (n_head / n_head_kv). REQUIRES: head_dim <= 256.
Status attention(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_kv_rows,
                 bool causal, int64_t pos0, const float* q, const float* k, const float* v, float scale,
                 float* out, cudaStream_t stream);
inline constexpr int64_t kAttentionMaxHeadDim = 256;

// out[n_tokens, width] = table[ids[t] - row_offset, :] for ids in [row_offset, row_offset + n_rows),
// zero rows otherwise (a vocabulary-parallel shard). table f32 or bf16 [n_rows, width]; ids int32.
Status embedding(int64_t n_tokens, const int32_t* ids, int64_t n_rows, int64_t width, int64_t row_offset,
                 Elem table_elem, const void* table, float* out, cudaStream_t stream);

// Row-wise softmax in place: x[rows, width], f32 with max subtraction.
Status softmax_rows(int64_t rows, int64_t width, float* x, cudaStream_t stream);

// Index of the largest value of x[n] into *index (device int64); the lowest index wins ties
// and a NaN never beats a number (kernels::cpu::argmax).
Status argmax(int64_t n, const float* x, int64_t* index, cudaStream_t stream);

// MoE router top-k, one block per token (kernels/cuda/router.cu), the twins of
// kernels/cpu/router.h with the same f32 operations in the same order and the same tie rule
// (descending score; equal scores: the lower index first; ids in that order). exp is taken
// in f64 and rounded once (glibc's expf is within 0.502 ulp of that), so a weight may differ
// from the CPU's by an ulp of its exp, and only near-ties that close can change an id.
// logits f32 [n_tokens, n_expert]; ids int32 [n_tokens, k]; weights f32 [n_tokens, k].
// REQUIRES: 1 <= k <= min(n_expert, kRouterMaxK), n_expert <= kRouterMaxExperts.
inline constexpr int64_t kRouterMaxExperts = 4096, kRouterMaxK = 64;
// Groups of the grouped router: its dynamic shared memory, (2 n_expert + n_group) x 4 +
// n_expert + n_group bytes, stays under the 48 KiB a launch may take without raising the
// kernel's limit (41,984 B at 4096 experts in 1024 groups; real models use 1 or 8 groups).
inline constexpr int64_t kRouterMaxGroups = 1024;
Status route_softmax_topk(int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize, const float* logits,
                          int32_t* ids, float* weights, cudaStream_t stream);
// Sigmoid scores, bias (f32 or bf16 [n_expert], may be null) for selection only, group-limited
// top-k (kernels/cpu/router.h). REQUIRES: as above, n_expert % n_group == 0, 1 <= topk_group
// <= min(n_group, kRouterMaxK), k <= topk_group * (n_expert / n_group), n_group <= kRouterMaxGroups.
Status route_sigmoid_group_topk(int64_t n_tokens, int64_t n_expert, int64_t k, int64_t n_group, int64_t topk_group,
                                bool renormalize, float scaling, const float* logits, Elem bias_elem,
                                const void* bias, int32_t* ids, float* weights, cudaStream_t stream);

}  // namespace dayzero::kernels::cuda
