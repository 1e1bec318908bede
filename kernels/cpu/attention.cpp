// attention_causal (ops.h): causal grouped-query attention over a KV cache. A work item is
// one token and one KV head with the query heads that share it, so each cache row is loaded
// once per group rather than once per head: scores = scale * q·k (SIMD dot), softmax with
// max subtraction (sum in double), then out = sum_j p_j v_j (SIMD, in blocks of rows). Items are
// independent, so threads never change a result. Not a fused flash kernel: it keeps
// n_kv scores per head in scratch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void attention_causal(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
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
    std::vector<double> sum(slice);
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
        double s = 0;
        for (int64_t j = 0; j < n_kv; ++j) {
          ph[j] = std::exp(ph[j] - max_score);
          s += ph[j];
        }
        sum[h] = s;
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
        const float inv = static_cast<float>(1.0 / sum[h]);
        float* o = out + (t * n_head + h0 + h) * head_dim;  // [head_dim]
        for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[h * head_dim + d] * inv;
      }
    }
  });
}

}  // namespace dayzero::kernels::cpu
