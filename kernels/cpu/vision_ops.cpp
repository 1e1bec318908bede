// Ops of ops.h that vision encoders need: LayerNorm with bias (f64 reductions), the GELU family
// (tanh approximation and quick_gelu as x * sigmoid over 16 lanes with the vectorised exp; erf
// through libm) and bidirectional attention without a KV cache, GEMM-tiled per kv head and tile
// of query rows through the serial "nn" kernel of vision_ops.h. Not fused with the GEMMs around
// them, and not a flash kernel: a tile's scores stay in scratch.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vision_ops.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void layernorm(int64_t rows, int64_t width, const float* x, const float* w, const float* b, float eps, float* y) {
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * width;  // [width]
      float* yr = y + r * width;
      double sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(width);
      double var = 0;
      for (int64_t i = 0; i < width; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(width) + eps);
      for (int64_t i = 0; i < width; ++i) {
        const float v = static_cast<float>((xr[i] - mean) * inv) * w[i];
        yr[i] = b ? v + b[i] : v;
      }
    }
  });
}

namespace {

// y = x / (1 + exp(inner(x))) over 16 lanes: the tanh GELU and quick_gelu as x * sigmoid,
// since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) (no cancellation where tanh(u) nears -1).
template <typename Inner>
inline simd::V16 x_sigmoid16(simd::V16 x, Inner inner) {
  return x / (1.0f + simd::exp16(inner(x)));
}

template <typename Inner>
void x_sigmoid(int64_t i0, int64_t i1, const float* x, float* y, Inner inner) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    simd::V16 v;
    std::memcpy(&v, x + i, sizeof v);
    v = x_sigmoid16(v, inner);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < i1) {  // the tail through a zero-padded block, so an element's value never depends on n
    float tail[16] = {};
    std::copy(x + i, x + i1, tail);
    simd::V16 v;
    std::memcpy(&v, tail, sizeof v);
    v = x_sigmoid16(v, inner);
    std::memcpy(tail, &v, sizeof v);
    std::copy(tail, tail + (i1 - i), y + i);
  }
}

}  // namespace

void gelu(int64_t n, GeluKind kind, const float* x, float* y) {
  // Chunks are multiples of 16 elements, so the vector blocks fall at the same indices
  // whatever the thread count.
  parallel_for((n + 15) / 16, int64_t{1} << 12, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * 16, i1 = std::min(n, b1 * 16);
    switch (kind) {
      case GeluKind::kErf:
        for (int64_t i = i0; i < i1; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        break;
      case GeluKind::kTanh:
        // -2 u with u = sqrt(2 / pi) (v + 0.044715 v^3)
        x_sigmoid(i0, i1, x, y, [](simd::V16 v) { return v * (-1.5957691216057307f - 0.0713548162726f * v * v); });
        break;
      case GeluKind::kQuick:
        x_sigmoid(i0, i1, x, y, [](simd::V16 v) { return v * -1.702f; });
        break;
    }
  });
}

namespace {

// C[MR, NV * kLanes] (+)= A[MR, k] · B[k, NV * kLanes]: A rows lda apart, B rows ldb apart (row
// major, the "nn" form), C rows ldc apart. Each C element is one FMA chain over p = 0 .. k-1 in
// order, started from 0 or from C (acc), so blocking k or tiling m and n never changes a result.
template <int MR, int NV>
void nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc, bool acc) {
  simd::Vec s[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) s[i][j] = acc ? simd::load(c + i * ldc + j * simd::kLanes) : simd::zero();
  for (int64_t p = 0; p < k; ++p) {
    simd::Vec av[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) av[i] = simd::load_scalar(a[i * lda + p]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
      const simd::Vec bv = simd::load(b + p * ldb + j * simd::kLanes);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) s[i][j] = simd::fma(av[i], bv, s[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) simd::store(c + i * ldc + j * simd::kLanes, s[i][j]);
}

// Register tile: kMr rows by kNv vectors of accumulators, plus kMr broadcasts and one load,
// within the 32 (AVX-512) or 16 (AVX2, generic) vector registers.
constexpr int kMr = 4;
#if defined(__AVX512F__)
constexpr int kNv = 5;
#else
constexpr int kNv = 2;
#endif

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool);
template <int MR, int... NV>
constexpr std::array<TileFn, sizeof...(NV)> tile_row(std::integer_sequence<int, NV...>) {
  return {&nn_tile<MR, NV + 1>...};
}
template <int... MR>
constexpr std::array<std::array<TileFn, kNv>, sizeof...(MR)> tile_table(std::integer_sequence<int, MR...>) {
  return {tile_row<MR + 1>(std::make_integer_sequence<int, kNv>{})...};
}
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, kMr>{});

}  // namespace

void matmul_nn_serial(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc, bool accumulate) {
  DZ_CHECK(n % simd::kLanes == 0, "matmul_nn_serial: n " << n << " is not a multiple of " << simd::kLanes);
  const int64_t nv = n / simd::kLanes;
  // k in blocks whose B panel (kKc rows of kNv vectors) stays in L1 across the row tiles.
  constexpr int64_t kKc = 256;
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const bool acc = accumulate || p0 > 0;
    for (int64_t j0 = 0; j0 < nv; j0 += kNv) {
      const int64_t jv = std::min<int64_t>(kNv, nv - j0);
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        const int64_t iv = std::min<int64_t>(kMr, m - i0);
        kTiles[iv - 1][jv - 1](a + i0 * lda + p0, lda, b + p0 * ldb + j0 * simd::kLanes, ldb, kc,
                               c + i0 * ldc + j0 * simd::kLanes, ldc, acc);
      }
    }
  }
}

int matmul_nn_lanes() { return simd::kLanes; }

void attention_full(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, const float* q,
                    const float* k, const float* v, float scale, float* out) {
  DZ_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
           "attention n_head " << n_head << " not a multiple of n_head_kv " << n_head_kv);
  DZ_CHECK(head_dim > 0 && n_tokens >= 0, "attention head_dim " << head_dim << " n_tokens " << n_tokens);
  if (n_tokens == 0) return;
  const int64_t group = n_head / n_head_kv, hd = head_dim, kv_row = n_head_kv * hd;
  const int64_t lanes = simd::kLanes;
  const int64_t n_pad = (n_tokens + lanes - 1) / lanes * lanes, hp = (hd + lanes - 1) / lanes * lanes;
  // Per kv head, packed once: K^T [hd, n_pad] (rows ldk apart: a stride of a multiple of 4 KiB
  // would put every row of a tile's panel in the same L1 set) and V [n_tokens, hp], padding zero.
  const int64_t ldk = n_pad + lanes;
  std::vector<float> kt(static_cast<size_t>(n_head_kv * hd * ldk), 0.0f);
  std::vector<float> vp(static_cast<size_t>(n_head_kv * n_tokens * hp), 0.0f);
  const int64_t n_blocks = (n_tokens + kPackPositions - 1) / kPackPositions;
  parallel_for(n_head_kv * n_blocks, std::max<int64_t>(1, 4096 / (hd * kPackPositions)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / n_blocks, j0 = i % n_blocks * kPackPositions;
      pack_kv_positions(j0, std::min(n_tokens, j0 + kPackPositions), hd, kv_row, k + g * hd, v + g * hd,
                        &kt[static_cast<size_t>(g * hd * ldk)], ldk, &vp[static_cast<size_t>(g * n_tokens * hp)], hp);
    }
  });
  // Work items (kv head, tile of query tokens: about 64 rows of tokens x the group's heads),
  // each on one thread with the serial kernel above, so the thread count never changes a result.
  const float scale_v = scale;  // a local: the lambda's loads of it cannot alias the scores
  const int64_t tile = std::max<int64_t>(1, 64 / group), n_tiles = (n_tokens + tile - 1) / tile;
  parallel_for(n_head_kv * n_tiles, 1, [&](int64_t i0, int64_t i1) {
    const int64_t max_rows = tile * group;
    std::vector<float> qp(static_cast<size_t>(max_rows * hd));    // Q tile [rows, hd]
    std::vector<float> s(static_cast<size_t>(max_rows * n_pad));  // scores, then p [rows, n_pad]
    std::vector<float> o(static_cast<size_t>(max_rows * hp));     // P V [rows, hp]
    std::vector<float> inv(static_cast<size_t>(max_rows));        // 1 / row sums
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item % n_head_kv, t0 = item / n_head_kv * tile;
      const int64_t nt = std::min(tile, n_tokens - t0), rows = nt * group;
      // Row r = tt * group + h: token t0 + tt, head g * group + h (contiguous in q per token).
      for (int64_t tt = 0; tt < nt; ++tt)
        std::memcpy(&qp[static_cast<size_t>(tt * group * hd)], q + ((t0 + tt) * n_head + g * group) * hd,
                    sizeof(float) * group * hd);
      matmul_nn_serial(rows, n_pad, hd, qp.data(), hd, &kt[static_cast<size_t>(g * hd * ldk)], ldk, s.data(),
                       n_pad, false);
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = &s[static_cast<size_t>(r * n_pad)];
        inv[r] = 1.0f / simd::exp_shift_sum(n_tokens, sr, simd::scale_and_max(n_tokens, scale_v, sr), sr);
      }
      matmul_nn_serial(rows, hp, n_tokens, s.data(), n_pad, &vp[static_cast<size_t>(g * n_tokens * hp)], hp,
                       o.data(), hp, false);
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = out + ((t0 + r / group) * n_head + g * group + r % group) * hd;
        for (int64_t d = 0; d < hd; ++d) dst[d] = o[static_cast<size_t>(r * hp + d)] * inv[r];
      }
    }
  });
}

}  // namespace dayzero::kernels::cpu
