// Internal to kernels/cpu and the kernel tests: the two implementations behind
// attention_causal (ops.h) and the rule between them. Same contract as attention_causal;
// each is checked against the same double-precision twin (tests/unit/kernels/attention_test.cpp).
#pragma once

#include <cstdint>

namespace dayzero::kernels::cpu {

// attention_causal takes the GEMM path when a call has at least this many query tokens
// (prefill and long chunks), the row path below it (decode, short chunks).
inline constexpr int64_t kAttentionGemmMinTokens = 16;

// Per (token, kv head) item, the query heads of the group together: scores by SIMD dot
// products over four cache positions at a time, vectorised exp, out by SIMD axpy over blocks
// of cache rows. Results do not depend on the thread count.
void attention_causal_rows(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, const float* q, const float* k, const float* v, float scale,
                           float* out);

// Per kv head and tile of query tokens (the group's heads batched as rows): S = Q K^T and
// O = P V as GEMMs on packed copies (the built-in kernel, one tile per thread at a time),
// keys past the tile's last token never computed (fully masked blocks skipped), the
// diagonal block masked, softmax with max subtraction and the vectorised exp. Results do
// not depend on the thread count.
void attention_causal_gemm(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, const float* q, const float* k, const float* v, float scale,
                           float* out);

// simd::exp_shift_sum compiled with the kernels' flags (the tests are not built for the
// native ISA): y[i] = exp(x[i] - shift), returns the sum.
float exp_shift_sum(int64_t n, const float* x, float shift, float* y);

}  // namespace dayzero::kernels::cpu
