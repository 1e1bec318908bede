// One signature per op: the CPU kernels (kernels/cpu/*.cpp) implement them on host f32
// buffers; the CUDA kernels (kernels/cuda/*.cu) mirror them on device buffers. Layouts are
// row-major and follow PyTorch: a Linear weight is [out, in]. Shapes are in the comments.
// Every op has a plain-loop twin in tests/unit/kernels that it is checked against.
#pragma once

#include <cstdint>
#include <string>

#include "core/stored_format.h"

namespace dayzero::kernels::cpu {

// Which GEMM implementation runs and why, e.g. "openblas 0.3.21 SkylakeX (library detected
// Prescott; forced)". Chosen once per process on first use; threads = BLAS threads.
struct GemmInfo {
  std::string path;
  int threads = 1;
};
const GemmInfo& gemm_info();
// Sets the number of GEMM threads (one per rank when ranks share a node's cores).
void gemm_set_threads(int n);

// y[m, n] = x[m, k] · w[n, k]^T (+ y when accumulate). w is a Linear weight [out=n, in=k].
void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
               bool accumulate = false);

// The same with w a bf16 Linear weight as stored (a checkpoint's own bits): widened to f32 inside
// the GEMM, summed in f32, so the weight is read at 2 bytes an element. Where matmul_nt takes the
// built-in small-M kernel (decode, m <= 16) the result has its bits on w widened; above, panels of
// w are widened into a buffer and take matmul_nt's large-M path.
void matmul_nt_bf16(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y,
                    bool accumulate = false);

// A Linear weight kept as stored, or one rank's slice of it: which row of the stored-format table
// it is (core/stored_format.h: fp8-block, int4-pack, mxfp4, nvfp4) and where its bytes are.
//  - q[n, k]: each row's elements from the slice's column 0 on, row i at q + i * row_bytes
//    (fp8-block: one E4M3 or E5M2 byte an element, row_bytes >= k; int4-pack: nibbles q + 8, two
//    a byte, low nibble first; mxfp4 / nvfp4: E2M1 codes the same way; row_bytes >= (k + 1) / 2).
//  - scale: the scales of the blocks of block_rows x block_cols that cover the slice, [scale
//    rows, scale_cols] row-major, as the row holds them (fp8-block f32, int4-pack bf16, mxfp4
//    UE8M0 bytes, nvfp4 E4M3 bytes), the first being the block of the slice's element (0, 0).
//  - row0, col0: where the slice starts in the whole weight, which places the block boundaries.
// Element (i, j) is decode(q[i, j]) * the scale of its block (nvfp4: f32(E4M3) / global_scale),
// one f32 multiply: the value the dequantising loads give (checkpoint/fp8.h, pack_quantized.h,
// fp4.h). NaN bytes and scales are refused on load. Each scheme's decoding is one tile view of
// the built-in kernel (gemm_builtin.cpp); everything else is shared.
struct StoredWeight {
  StoredScheme scheme = StoredScheme::kFp8Block;
  const uint8_t* q = nullptr;
  const void* scale = nullptr;
  int64_t row_bytes = 0;
  int64_t scale_cols = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t block_rows = 1, block_cols = 1;
  bool e5m2 = false;          // fp8-block: the bytes are E5M2
  float global_scale = 1.0f;  // nvfp4: the per-tensor divisor
};

// Rows [j0, j0 + rows) of a weight as stored w[n, k] dequantised into out[rows, k]: the bits the
// dequantising load gives them.
void dequantise_stored_rows(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out);

// matmul_nt with w a weight as stored, read at its own bits an element (and its scales). Where
// matmul_nt takes the built-in small-M kernel (m <= 16) each element is converted inside the
// GEMM and the result has the bits of matmul_nt on the dequantised weight; above, panels of w are
// dequantised into a buffer and take the large-M path, as matmul_nt_bf16's are widened.
void matmul_nt_stored(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                      bool accumulate = false);

// The weight of a product: f32, bf16 as stored, or quantized as stored (StoredWeight).
enum class WeightKind : uint8_t { kF32, kBF16, kStored };

// One product of matmul_nt_shared_x: y[m, n] = x · w[n, k]^T. w points to the elements (f32,
// bf16) or to the StoredWeight.
struct NtProduct {
  int64_t n = 0;
  const void* w = nullptr;
  WeightKind kind = WeightKind::kF32;
  float* y = nullptr;
};
// Several products of one x[m, k] (q, k and v; gate and up), each with the bits of its own
// matmul_nt / matmul_nt_bf16 / matmul_nt_stored call. Where those take the built-in small-M kernel (decode batches)
// the columns of all of them run as one parallel loop: one wait for the worker pool instead of
// one per product, which at batch 1 is a measurable share of a small product's time. At most
// kMaxSharedXProducts products (the callers have 2 or 3); no allocation on this decode path.
inline constexpr int kMaxSharedXProducts = 8;
void matmul_nt_shared_x(int64_t m, int64_t k, const float* x, const NtProduct* products, int count,
                        bool accumulate = false);

// y[rows, width] = x / sqrt(mean(x^2) + eps) * w   (w [width]; HF LlamaRMSNorm, f32 math)
void rmsnorm(int64_t rows, int64_t width, const float* x, const float* w, float eps, float* y);
// residual[rows, width] += delta, then y = rmsnorm(residual) * w: the bits of add_inplace then
// rmsnorm, in one pass.
void add_rmsnorm(int64_t rows, int64_t width, const float* delta, float* residual, const float* w, float eps,
                 float* y);

// Rotates x[n_tokens, n_head, head_dim] in place, HF rotate-half convention: pairs (i, i + d/2)
// for i < d/2 with angle positions[t] * inv_freq[i]; inv_freq [head_dim / 2].
void rope_rotate_half(int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
                      const float* inv_freq, float* x);
// The same in two steps: the cos/sin table of the angles positions[t] * inv_freq[i]
// (cos_t, sin_t [n_tokens, half], half = head_dim / 2), then the rotation with it; the two give
// rope_rotate_half's bits.
void rope_angles(int64_t n_tokens, int64_t half, const int32_t* positions, const float* inv_freq, float* cos_t,
                 float* sin_t);
void rope_rotate_half_table(int64_t n_tokens, int64_t n_head, int64_t head_dim, const float* cos_t,
                            const float* sin_t, float* x);

// Causal grouped-query attention over a KV cache.
//   q   [n_tokens, n_head, head_dim]       queries of tokens at positions pos0 .. pos0+n_tokens-1
//   k,v [n_ctx_max, n_head_kv, head_dim]  cache rows 0 .. pos0+n_tokens-1 are valid
//   out [n_tokens, n_head, head_dim]
// Head h reads kv head h / (n_head / n_head_kv). Token t attends to cache rows 0..pos0+t.
// scale multiplies q·k (usually 1/sqrt(head_dim)). Softmax in f32 with max subtraction.
void attention_causal(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                      int64_t pos0, const float* q, const float* k, const float* v, float scale,
                      float* out);

// out[n] = silu(gate[n]) * up[n]
void swiglu(int64_t n, const float* gate, const float* up, float* out);

// out[n_tokens, width] = table[ids[t], :]  (table [n_rows, width]; ids checked < n_rows)
void embedding(int64_t n_tokens, const int32_t* ids, int64_t n_rows, int64_t width, const float* table,
               float* out);

// y[n] += x[n]
void add_inplace(int64_t n, const float* x, float* y);
// y[rows, width] += b[width]
void add_bias(int64_t rows, int64_t width, const float* b, float* y);

// Index of the largest value; the lowest index wins ties (deterministic greedy decoding).
int64_t argmax(int64_t n, const float* x);

// log-softmax of x[n] evaluated at index i: x[i] - logsumexp(x)  (f64 accumulation)
double log_softmax_at(int64_t n, const float* x, int64_t i);

// Vision encoders (kernels/cpu/vision_ops.cpp).
// y[rows, width] = (x - mean) / sqrt(var + eps) * w (+ b when b is not null); biased variance,
// f64 reductions (torch.nn.LayerNorm).
void layernorm(int64_t rows, int64_t width, const float* x, const float* w, const float* b, float eps, float* y);

// The GELU family: erf (nn.GELU()), tanh approximation (gelu_pytorch_tanh), quick_gelu
// (x * sigmoid(1.702 x), CLIP's original activation).
enum class GeluKind { kErf, kTanh, kQuick };
// y[n] = gelu(x[n]); y may alias x.
void gelu(int64_t n, GeluKind kind, const float* x, float* y);

// Bidirectional (unmasked) attention of every token to every token, no cache:
//   q [n_tokens, n_head, head_dim], k,v [n_tokens, n_head_kv, head_dim], out like q.
// Head h reads kv head h / (n_head / n_head_kv); softmax in f32 with max subtraction.
void attention_full(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, const float* q,
                    const float* k, const float* v, float scale, float* out);

}  // namespace dayzero::kernels::cpu
