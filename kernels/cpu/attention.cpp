// attention_causal (ops.h): causal grouped-query attention over a KV cache, two paths
// (kernels/cpu/attention.h). Rows (decode): a work item is one token and one KV head with the
// query heads that share it, so each cache row is loaded once per group: scores = scale * q·k
// (SIMD dot), softmax with max subtraction (simd::exp_shift_sum), out = sum_j p_j v_j (SIMD,
// in blocks of rows). GEMM (prefill): K^T and V packed per KV head, then per block of query
// rows S = Q K^T and O = P V through one register-blocked kernel (broadcast x vector FMAs),
// keys past the block's last token never computed. Not a fused flash kernel: a block keeps its
// scores in scratch and takes the exact row max before the exp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void attention_causal_rows(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                      const float* q, const float* k, const float* v, float scale, float* out) {
  DZ_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
           "attention n_head " << n_head << " not a multiple of n_head_kv " << n_head_kv);
  DZ_CHECK(head_dim > 0 && pos0 >= 0 && n_tokens >= 0, "attention head_dim " << head_dim << " pos0 " << pos0);
  const int64_t group = n_head / n_head_kv;
  const int64_t kv_row = n_head_kv * head_dim;  // floats between consecutive cache positions
  const int64_t n_ctx = pos0 + n_tokens;
  // Decode has few (token, KV head) items; split a group's heads into slices until every
  // thread has a few items. The slice size never changes what a head computes.
  int64_t slice = group;
  while (slice > 1 && n_tokens * n_head_kv * ((group + slice - 1) / slice) < 4 * kernel_threads()) {
    slice = (slice + 1) / 2;
  }
  const int64_t n_slices = (group + slice - 1) / slice;
  const int64_t items = n_tokens * n_head_kv * n_slices;  // (t, g, slice), slice fastest
  // About 1 MFLOP of the longest rows per chunk; but a decode step's few items (one token, a
  // few heads: 0.3 MFLOP at 128 cached tokens) are spread over the threads once they are worth
  // a wake-up (~64 KFLOP), as the products around them are.
  const int64_t item_flops = std::max<int64_t>(1, n_ctx * head_dim * slice * 4);
  int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / item_flops);
  if (items * item_flops >= (int64_t{1} << 16)) {
    grain = std::clamp<int64_t>(items / (2 * int64_t{kernel_threads()}), 1, grain);
  }
  parallel_for(items, grain, [&](int64_t i0, int64_t i1) {
    std::vector<float> p(slice * n_ctx);        // [slice, n_kv] scores, then exp(score - max)
    std::vector<float> acc(slice * head_dim);   // [slice, head_dim]
    std::vector<float> sum(slice);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / (n_head_kv * n_slices);
      const int64_t g = item / n_slices % n_head_kv;
      const int64_t h0 = g * group + item % n_slices * slice;    // first query head
      const int64_t nh = std::min(slice, (g + 1) * group - h0);  // heads in this slice
      const int64_t n_kv = pos0 + t + 1;
      const float* qt = q + (t * n_head + h0) * head_dim;  // [nh, head_dim]
      const float* kg = k + g * head_dim;                  // cache row j at kg + j * kv_row
      const float* vg = v + g * head_dim;
      int64_t j = 0;
      for (; j + 4 <= n_kv; j += 4) {
        for (int64_t h = 0; h < nh; ++h) {
          float s[4];
          simd::dot4(qt + h * head_dim, kg + j * kv_row, kv_row, head_dim, s);
          for (int r = 0; r < 4; ++r) p[h * n_ctx + j + r] = scale * s[r];
        }
      }
      for (; j < n_kv; ++j) {
        for (int64_t h = 0; h < nh; ++h) {
          p[h * n_ctx + j] = scale * simd::dot(qt + h * head_dim, kg + j * kv_row, head_dim);
        }
      }
      for (int64_t h = 0; h < nh; ++h) {
        float* ph = p.data() + h * n_ctx;
        const float max_score = *std::max_element(ph, ph + n_kv);
        sum[h] = simd::exp_shift_sum(n_kv, ph, max_score, ph);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      // Blocks of cache rows small enough to stay in L1 while every head of the slice uses them.
      constexpr int64_t kRows = 16;
      for (int64_t j0 = 0; j0 < n_kv; j0 += kRows) {
        const int64_t rows = std::min(kRows, n_kv - j0);
        for (int64_t h = 0; h < nh; ++h) {
          simd::axpy_rows(head_dim, rows, p.data() + h * n_ctx + j0, vg + j0 * kv_row, kv_row,
                          acc.data() + h * head_dim);
        }
      }
      for (int64_t h = 0; h < nh; ++h) {
        const float inv = 1.0f / sum[h];
        float* o = out + (t * n_head + h0 + h) * head_dim;  // [head_dim]
        for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[h * head_dim + d] * inv;
      }
    }
  });
}

namespace {

// Register block of the prefill micro-kernel: kMr rows by kNc vectors (kBw floats) of
// accumulators, sized to the ISA's register file (AVX-512: 24 of 32 zmm; AVX2: 12 of 16 ymm).
#if defined(__AVX512F__)
constexpr int kMr = 6, kNc = 4;
#elif defined(__AVX2__)
constexpr int kMr = 6, kNc = 2;
#else
constexpr int kMr = 4, kNc = 2;
#endif
constexpr int64_t kBw = int64_t{kNc} * simd::kLanes;  // columns of one block

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// c[r][0, NC * kLanes) = sum_{i < kk} a[r][i] * b[i * ldb + (0, NC * kLanes)] for r < R:
// every output element is one FMA chain over i in order, so its bits depend on its inputs
// alone (not on R, NC, the block's position or the thread).
template <int R, int NC>
void block_kernel(int64_t kk, const float* const* a, const float* b, int64_t ldb, float* const* c) {
  simd::Vec acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NC; ++n) acc[r][n] = simd::zero();
  for (int64_t i = 0; i < kk; ++i) {
    const float* bi = b + i * ldb;
    simd::Vec bv[NC];
#pragma GCC unroll 4
    for (int n = 0; n < NC; ++n) bv[n] = simd::load(bi + n * simd::kLanes);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const simd::Vec ar = simd::load_scalar(a[r][i]);
#pragma GCC unroll 4
      for (int n = 0; n < NC; ++n) acc[r][n] = simd::fma(ar, bv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NC; ++n) simd::store(c[r] + n * simd::kLanes, acc[r][n]);
}

// block_kernel with R = rows (1 ..= kMr) and NC = vecs (1 ..= kNc) chosen at run time.
using BlockFn = void (*)(int64_t, const float* const*, const float*, int64_t, float* const*);
template <int R, int... NC>
constexpr std::array<BlockFn, kNc> block_row(std::integer_sequence<int, NC...>) {
  return {&block_kernel<R, NC + 1>...};
}
template <int... R>
constexpr std::array<std::array<BlockFn, kNc>, kMr> block_table(std::integer_sequence<int, R...>) {
  return {block_row<R + 1>(std::make_integer_sequence<int, kNc>{})...};
}
constexpr auto kBlockFns = block_table(std::make_integer_sequence<int, kMr>{});

// The columns [0, cols) of b in blocks of kBw, the last one narrowed to whole vectors:
// c[r][j] for j < round_up(cols, kLanes) (b and c hold that many columns).
void block_rows(int rows, int64_t cols, int64_t kk, const float* const* a, const float* b, int64_t ldb,
                float* const* c) {
  float* cj[kMr];
  for (int64_t j0 = 0; j0 < cols; j0 += kBw) {
    const int64_t vecs = std::min<int64_t>(kNc, (cols - j0 + simd::kLanes - 1) / simd::kLanes);
    for (int r = 0; r < rows; ++r) cj[r] = c[r] + j0;
    kBlockFns[static_cast<size_t>(rows - 1)][static_cast<size_t>(vecs - 1)](kk, a, b + j0, ldb, cj);
  }
}

}  // namespace

void attention_causal_gemm(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                           const float* q, const float* k, const float* v, float scale, float* out) {
  DZ_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
           "attention n_head " << n_head << " not a multiple of n_head_kv " << n_head_kv);
  DZ_CHECK(head_dim > 0 && pos0 >= 0 && n_tokens >= 0, "attention head_dim " << head_dim << " pos0 " << pos0);
  if (n_tokens == 0) return;
  const int64_t group = n_head / n_head_kv, hd = head_dim;
  const int64_t kv_row = n_head_kv * hd;  // floats between consecutive cache positions
  const int64_t n_ctx = pos0 + n_tokens;
  // Packed once per kv head, padded with zeros to whole vectors:
  //   kt [n_head_kv][hd, ctx_pad]   K^T, so a block of keys is consecutive floats per dim
  //   vp [n_head_kv][n_ctx, hd_pad] V with rows hd_pad apart
  const int64_t ctx_pad = round_up(n_ctx, simd::kLanes), hd_pad = round_up(hd, simd::kLanes);
  std::unique_ptr<float[]> kt(new float[n_head_kv * hd * ctx_pad]), vp(new float[n_head_kv * n_ctx * hd_pad]);
  // A copy of the cache by blocks of positions: split over threads only when long.
  const int64_t n_blocks = (n_ctx + kPackPositions - 1) / kPackPositions;
  parallel_for(n_head_kv * n_blocks, std::max<int64_t>(1, (int64_t{1} << 18) / (hd * kPackPositions)),
               [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / n_blocks, j0 = i % n_blocks * kPackPositions;
      pack_kv_positions(j0, std::min(n_ctx, j0 + kPackPositions), hd, kv_row, k + g * hd, v + g * hd,
                        &kt[g * hd * ctx_pad], ctx_pad, &vp[g * n_ctx * hd_pad], hd_pad);
    }
  });
  for (int64_t i = 0; i < n_head_kv * hd; ++i) std::fill(&kt[i * ctx_pad + n_ctx], &kt[(i + 1) * ctx_pad], 0.0f);
  // Rows of one kv head: r = t * group + h (token t, query head g * group + h); a work item is
  // kMr consecutive rows, so it spans one to a few tokens and computes keys up to its last
  // row's token only (rounded up to a whole vector): fully masked keys are never computed
  // beyond that rounding and the few tokens of the block. Items run longest first.
  const int64_t rows_per_head = n_tokens * group;
  const int64_t blocks_per_head = (rows_per_head + kMr - 1) / kMr;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(1, n_ctx * hd));
  parallel_for(n_head_kv * blocks_per_head, grain, [&](int64_t i0, int64_t i1) {
    // Written before read: S by the QK^T blocks, O by the PV blocks.
    std::unique_ptr<float[]> s(new float[kMr * ctx_pad]);  // scores, then p [kMr, keys]
    std::unique_ptr<float[]> o(new float[kMr * hd_pad]);   // P V [kMr, hd_pad]
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item % n_head_kv, blk = blocks_per_head - 1 - item / n_head_kv;
      const int64_t r0 = blk * kMr;
      const int rows = static_cast<int>(std::min<int64_t>(kMr, rows_per_head - r0));
      const int64_t n_kv = pos0 + (r0 + rows - 1) / group + 1;  // keys of the block's last row
      const float* qr[kMr];
      float* sr[kMr];
      float* orow[kMr];
      float inv[kMr];
      for (int r = 0; r < rows; ++r) {
        const int64_t t = (r0 + r) / group, h = g * group + (r0 + r) % group;
        qr[r] = q + (t * n_head + h) * hd;
        sr[r] = &s[r * ctx_pad];
        orow[r] = &o[r * hd_pad];
      }
      // S = Q K^T over the keys [0, n_kv) (and on to the next whole vector).
      block_rows(rows, n_kv, hd, qr, &kt[g * hd * ctx_pad], ctx_pad, sr);
      // Softmax over each row's own keys; the masked ones, up to n_kv, become 0.
      for (int r = 0; r < rows; ++r) {
        float* p = sr[r];
        const int64_t valid = pos0 + (r0 + r) / group + 1;
        const float max_score = simd::scale_and_max(valid, scale, p);
        inv[r] = 1.0f / simd::exp_shift_sum(valid, p, max_score, p);
        std::fill(p + valid, p + n_kv, 0.0f);
      }
      // O = P V over the keys [0, n_kv), by column blocks of V.
      block_rows(rows, hd, n_kv, sr, &vp[g * n_ctx * hd_pad], hd_pad, orow);
      for (int r = 0; r < rows; ++r) {
        float* dst = out + (qr[r] - q);  // same [t, h] position as its query row
        for (int64_t d = 0; d < hd; ++d) dst[d] = orow[r][d] * inv[r];
      }
    }
  });
}

void pack_kv_positions(int64_t j0, int64_t j1, int64_t hd, int64_t kv_row, const float* k, const float* v, float* kt,
                       int64_t ldk, float* vp, int64_t ldv) {
  for (int64_t d = 0; d < hd; ++d) {
    float* dst = kt + d * ldk;
    for (int64_t j = j0; j < j1; ++j) dst[j] = k[j * kv_row + d];
  }
  for (int64_t j = j0; j < j1; ++j) {
    float* vj = vp + j * ldv;
    std::memcpy(vj, v + j * kv_row, sizeof(float) * hd);
    std::fill(vj + hd, vj + ldv, 0.0f);
  }
}

float exp_shift_sum(int64_t n, const float* x, float shift, float* y) {
  return simd::exp_shift_sum(n, x, shift, y);
}

void attention_causal(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                      const float* q, const float* k, const float* v, float scale, float* out) {
  if (n_tokens >= kAttentionGemmMinTokens) {
    attention_causal_gemm(n_tokens, n_head, n_head_kv, head_dim, pos0, q, k, v, scale, out);
  } else {
    attention_causal_rows(n_tokens, n_head, n_head_kv, head_dim, pos0, q, k, v, scale, out);
  }
}

}  // namespace dayzero::kernels::cpu
