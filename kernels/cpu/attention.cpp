// attention_causal (ops.h): causal grouped-query attention over a KV cache, two paths
// (kernels/cpu/attention.h). Rows (decode): a work item is one token and one KV head with the
// query heads that share it, so each cache row is loaded once per group: scores = scale * q·k
// (SIMD dot), softmax with max subtraction (simd::exp_shift_sum), out = sum_j p_j v_j (SIMD,
// in blocks of rows). GEMM (prefill): per KV head and query tile, QK^T and PV through
// the built-in register-tiled GEMM kernel, tiles spread over the threads. Not a fused flash kernel: both keep a tile's scores in scratch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
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
  // About 1 MFLOP of the longest rows per chunk.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 19) / std::max<int64_t>(1, n_ctx * head_dim * slice));
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

void attention_causal_gemm(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                           const float* q, const float* k, const float* v, float scale, float* out) {
  DZ_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
           "attention n_head " << n_head << " not a multiple of n_head_kv " << n_head_kv);
  DZ_CHECK(head_dim > 0 && pos0 >= 0 && n_tokens >= 0, "attention head_dim " << head_dim << " pos0 " << pos0);
  const int64_t group = n_head / n_head_kv, hd = head_dim;
  const int64_t kv_row = n_head_kv * hd;  // floats between consecutive cache positions
  const int64_t n_ctx = pos0 + n_tokens;
  // Query tokens per tile: about 64 GEMM rows (tokens x the group's heads). A tile computes
  // the keys up to its last token; the masked part is under half a tile of wasted work.
  const int64_t tile = std::max<int64_t>(4, 64 / group);
  const int64_t n_tiles = (n_tokens + tile - 1) / tile;
  // K and V^T of each kv head packed once: kp [n_kv_head][n_ctx, hd], vt [n_kv_head][hd, n_ctx].
  std::vector<float> kp(n_head_kv * n_ctx * hd), vt(n_head_kv * hd * n_ctx);
  parallel_for(n_head_kv * n_ctx, std::max<int64_t>(1, 4096 / hd), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / n_ctx, j = i % n_ctx;
      std::memcpy(&kp[(g * n_ctx + j) * hd], k + j * kv_row + g * hd, sizeof(float) * hd);
      const float* vj = v + j * kv_row + g * hd;
      for (int64_t d = 0; d < hd; ++d) vt[(g * hd + d) * n_ctx + j] = vj[d];
    }
  });
  // Work items (kv head, query tile), the longest tiles first so the threads finish together.
  // Each runs the serial built-in GEMM: a BLAS call per tile would start and stop its own
  // threads hundreds of times per layer, and items are independent, so the thread count
  // never changes a result.
  parallel_for(n_head_kv * n_tiles, 1, [&](int64_t i0, int64_t i1) {
    const int64_t max_rows = tile * group;
    std::vector<float> qp(max_rows * hd);   // Q tile [rows, hd]
    std::vector<float> s(max_rows * n_ctx);  // scores, then p [rows, n_kv]
    std::vector<float> vs(hd * n_ctx);       // V^T of the tile's keys, rows n_kv apart [hd, n_kv]
    std::vector<float> o(max_rows * hd);    // P V [rows, hd]
    std::vector<float> inv(max_rows);       // 1 / row sums
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item % n_head_kv, t0 = (n_tiles - 1 - item / n_head_kv) * tile;
      const int64_t nt = std::min(tile, n_tokens - t0), rows = nt * group, n_kv = pos0 + t0 + nt;
      // Row r = tt * group + h: token t0 + tt, head g * group + h (contiguous in q per token).
      for (int64_t tt = 0; tt < nt; ++tt) {
        std::memcpy(&qp[tt * group * hd], q + ((t0 + tt) * n_head + g * group) * hd, sizeof(float) * group * hd);
      }
      gemm::builtin_matmul_nt_serial(rows, n_kv, hd, qp.data(), &kp[g * n_ctx * hd], s.data());
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = &s[r * n_kv];
        const int64_t valid = pos0 + t0 + r / group + 1;  // the diagonal block's mask
        for (int64_t j = 0; j < valid; ++j) sr[j] *= scale;
        const float max_score = *std::max_element(sr, sr + valid);
        inv[r] = 1.0f / simd::exp_shift_sum(valid, sr, max_score, sr);
        std::fill(sr + valid, sr + n_kv, 0.0f);
      }
      for (int64_t d = 0; d < hd; ++d) {
        std::memcpy(&vs[d * n_kv], &vt[(g * hd + d) * n_ctx], sizeof(float) * n_kv);
      }
      gemm::builtin_matmul_nt_serial(rows, hd, n_kv, s.data(), vs.data(), o.data());
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = out + ((t0 + r / group) * n_head + g * group + r % group) * hd;
        for (int64_t d = 0; d < hd; ++d) dst[d] = o[r * hd + d] * inv[r];
      }
    }
  });
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
