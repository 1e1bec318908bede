// The built-in GEMM path: y = x · w^T as register-tiled dot products (x and w are both
// contiguous along k), blocked over k and over rows of x, split over n across threads.
// It is the fallback when no BLAS library loads and the second opinion in the tests; it is
// not tuned to compete with a BLAS library's packed outer-product kernels.
#include <algorithm>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace dayzero::kernels::cpu::gemm {
namespace {

using simd::Vec;

// Register tile kMr x kNr accumulators plus kMr x-vectors and one w-vector fit the 16
// (AVX2) or 32 (AVX-512) vector registers. m = 1 has no x reuse, so it takes a 1 x kNrGemv
// tile, which keeps more independent loads in flight.
#if defined(__AVX512F__)
constexpr int kMr = 4, kNr = 6, kNrGemv = 12;
#else
constexpr int kMr = 3, kNr = 4, kNrGemv = 8;
#endif
// A k block: kNr rows of w (kNr * kKc floats) stay in L1 while a column of x tiles passes.
constexpr int64_t kKc = 512;
// Rows of x per block: kMc * kKc floats (128 KiB) stay in L2 while all of w's rows pass.
constexpr int64_t kMc = 64;
static_assert(kKc % simd::kLanes == 0, "only the last k block may have a scalar tail");
// A row of y therefore sums in the same order whether m is 1 or larger only when k <= kKc;
// like the BLAS libraries (sgemv vs sgemm), the two are not bit-identical in general.

// y[MR, NR] (+)= x[MR, kc] · w[NR, kc]^T; x and w rows are `ld` floats apart, y rows `ldy`.
// Each y element is: lanes summed by hsum, then the scalar tail, then added to y. That
// order is the same for every tile shape, so the split into tiles never changes a result.
template <int MR, int NR>
void tile(const float* x, const float* w, int64_t ld, int64_t kc, float* y, int64_t ldy, bool add) {
  // Fully unrolled so the accumulators live in registers; -O2 keeps these loops rolled and
  // the array in memory, at a third of the speed.
  Vec acc[MR][NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[i][j] = simd::zero();
  int64_t p = 0;
  for (; p + simd::kLanes <= kc; p += simd::kLanes) {
    Vec xv[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) xv[i] = simd::load(x + i * ld + p);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      const Vec wv = simd::load(w + j * ld + p);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][j] = simd::fma(xv[i], wv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = simd::hsum(acc[i][j]);
      for (int64_t q = p; q < kc; ++q) s += x[i * ld + q] * w[j * ld + q];
      float& out = y[i * ldy + j];
      out = add ? out + s : s;
    }
  }
}

// Runs the MR' x NR' tile for mr <= MR, nr <= NR (edges of the matrix).
template <int MR, int NR>
void tile_edge(int mr, int nr, const float* x, const float* w, int64_t ld, int64_t kc, float* y, int64_t ldy,
               bool add) {
  if constexpr (MR > 1) {
    if (mr < MR) return tile_edge<MR - 1, NR>(mr, nr, x, w, ld, kc, y, ldy, add);
  }
  if constexpr (NR > 1) {
    if (nr < NR) return tile_edge<MR, NR - 1>(mr, nr, x, w, ld, kc, y, ldy, add);
  }
  tile<MR, NR>(x, w, ld, kc, y, ldy, add);
}

// Columns [j0, j1) of y, all rows.
void gemm_columns(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y, float beta,
                  int64_t j0, int64_t j1) {
  const bool gemv = m == 1;
  const int mr = gemv ? 1 : kMr;
  const int nr = gemv ? kNrGemv : kNr;
  // m = 1 reads each w row once: unblocked, its rows stream end to end for the prefetcher.
  const int64_t block = gemv ? k : kKc;
  for (int64_t kb = 0; kb < k; kb += block) {
    const int64_t kc = std::min(block, k - kb);
    const bool add = kb > 0 || beta != 0.0f;
    for (int64_t ib = 0; ib < m; ib += kMc) {
      const int64_t ie = std::min(m, ib + kMc);
      for (int64_t j = j0; j < j1; j += nr) {
        const int jn = static_cast<int>(std::min<int64_t>(nr, j1 - j));
        for (int64_t i = ib; i < ie; i += mr) {
          const int in = static_cast<int>(std::min<int64_t>(mr, ie - i));
          const float* xt = x + i * k + kb;
          const float* wt = w + j * k + kb;
          float* yt = y + i * n + j;
          if (gemv) {
            tile_edge<1, kNrGemv>(in, jn, xt, wt, k, kc, yt, n, add);
          } else {
            tile_edge<kMr, kNr>(in, jn, xt, wt, k, kc, yt, n, add);
          }
        }
      }
    }
  }
}

class Builtin final : public GemmPath {
 public:
  std::string name() const override {
    return std::string("builtin ") + simd::kIsaName + " " + std::to_string(kMr) + "x" + std::to_string(kNr) +
           " tiles";
  }
  void set_threads(int n) override { set_kernel_threads(n); }
  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    const int64_t nr = m == 1 ? kNrGemv : kNr;
    const int64_t n_tiles = (n + nr - 1) / nr;
    // Below ~1 MFLOP per thread, starting threads costs more than it saves.
    const int64_t work = m * n * k;
    const int64_t threads = std::clamp<int64_t>(work >> 19, 1, kernel_threads());
    const int64_t tiles_per_chunk = (n_tiles + threads - 1) / threads;
    parallel_for(n_tiles, tiles_per_chunk, [&](int64_t t0, int64_t t1) {
      gemm_columns(m, n, k, x, w, y, beta, t0 * nr, std::min(n, t1 * nr));
    });
  }
};

}  // namespace

void builtin_matmul_nt_serial(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
  gemm_columns(m, n, k, x, w, y, 0.0f, 0, n);
}

GemmPath* builtin() {
  static Builtin path;
  return &path;
}

}  // namespace dayzero::kernels::cpu::gemm
