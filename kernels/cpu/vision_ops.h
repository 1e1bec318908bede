// Internal to kernels/cpu and the kernel tests: the serial GEMM kernel behind attention_full
// (ops.h) in the form attention needs, B row-major ("nn": K^T and V packed as they are read).
// Not a general GEMM: model code calls matmul_nt (ops.h).
#pragma once

#include <cstdint>

namespace dayzero::kernels::cpu {

// C[m, n] = A[m, k] · B[k, n] (+ C when accumulate) on the calling thread: A, B, C row-major
// with leading dimensions lda, ldb, ldc. Every C element is one f32 FMA chain over k in order,
// so the result does not depend on how m, n or k are tiled.
// REQUIRES: n is a multiple of the SIMD width (matmul_nn_lanes()); B and C have n columns.
void matmul_nn_serial(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc, bool accumulate);

// The SIMD width the kernels were compiled for (16 AVX-512, 8 AVX2, 4 otherwise).
int matmul_nn_lanes();

}  // namespace dayzero::kernels::cpu
