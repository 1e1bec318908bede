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

// Per kv head, K^T and V packed once; per block of query rows (the group's heads of a few
// tokens): S = Q K^T and O = P V through one register-blocked kernel, keys past the block's
// last token never computed (fully masked keys skipped), each row's own mask applied,
// softmax with max subtraction and the vectorised exp. Results do not depend on the thread
// count.
void attention_causal_gemm(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, const float* q, const float* k, const float* v, float scale,
                           float* out);

// Positions [j0, j1) of one kv head of a cache k, v (position j at k + j * kv_row, hd floats;
// the caller offsets k and v to the head) into K^T (kt: hd rows ldk floats apart, column j for
// position j) and V (vp: row j, ldv floats apart, zero from hd to ldv). K^T columns past the
// last position are the caller's to fill. The prefill and encoder attentions call it on blocks
// of kPackPositions positions, so each K^T row is written a block at a time.
inline constexpr int64_t kPackPositions = 16;
void pack_kv_positions(int64_t j0, int64_t j1, int64_t hd, int64_t kv_row, const float* k, const float* v, float* kt,
                       int64_t ldk, float* vp, int64_t ldv);

// simd::exp_shift_sum compiled with the kernels' flags (the tests are not built for the
// native ISA): y[i] = exp(x[i] - shift), returns the sum.
float exp_shift_sum(int64_t n, const float* x, float shift, float* y);

}  // namespace dayzero::kernels::cpu
