// DeepSeek-V4's lightning indexer (v4_indexer.h): query heads, head weights, scores, top-k.
#include "model/blocks/v4_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace dayzero::model::blocks {

void index_select(const IndexerSizes& s, std::span<const float> x, std::span<const float> q_residual, int64_t n,
                  int64_t pos0, std::span<const float> keys, int64_t n_keys, std::span<const float> wq_b,
                  std::span<const float> weights_proj, std::span<const float> inv_freq, std::span<int32_t> picks) {
  const int64_t H = s.n_heads, hd = s.head_dim;
  DZ_CHECK(static_cast<int64_t>(x.size()) == n * s.d && static_cast<int64_t>(q_residual.size()) == n * s.q_lora &&
               static_cast<int64_t>(keys.size()) == n_keys * hd && static_cast<int64_t>(wq_b.size()) == H * hd * s.q_lora &&
               static_cast<int64_t>(weights_proj.size()) == H * s.d &&
               static_cast<int64_t>(inv_freq.size()) * 2 == s.rope_dim && static_cast<int64_t>(picks.size()) == n * s.topk,
           "index_select: sizes of " << n << " rows, " << n_keys << " keys");
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float weights_scale = 1.0f / std::sqrt(static_cast<float>(H));
  std::vector<float> q(H * hd), w(H), score(n_keys);
  std::vector<int32_t> order(n_keys);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x.data() + r * s.d;
    const float* qr = q_residual.data() + r * s.q_lora;
    const auto pos = static_cast<float>(pos0 + r);
    for (int64_t o = 0; o < H * hd; ++o) {
      float acc = 0;
      for (int64_t i = 0; i < s.q_lora; ++i) acc += qr[i] * wq_b[o * s.q_lora + i];
      q[o] = acc;
    }
    for (int64_t h = 0; h < H; ++h) {
      float* rot = q.data() + h * hd + hd - s.rope_dim;
      for (int64_t i = 0; i < s.rope_dim / 2; ++i) {
        const float a = pos * inv_freq[i], cs = std::cos(a), sn = std::sin(a);
        const float x0 = rot[2 * i], x1 = rot[2 * i + 1];
        rot[2 * i] = x0 * cs - x1 * sn;
        rot[2 * i + 1] = x1 * cs + x0 * sn;
      }
      float acc = 0;
      for (int64_t i = 0; i < s.d; ++i) acc += xr[i] * weights_proj[h * s.d + i];
      w[h] = acc * weights_scale;
    }
    const int64_t visible = std::min<int64_t>(n_keys, (pos0 + r + 1) / s.rate);
    for (int64_t t = 0; t < visible; ++t) {
      float acc = 0;
      for (int64_t h = 0; h < H; ++h) {
        float dot = 0;
        for (int64_t c = 0; c < hd; ++c) dot += q[h * hd + c] * keys[t * hd + c];
        acc += std::max(dot, 0.0f) * softmax_scale * w[h];
      }
      score[t] = acc;
    }
    const int64_t k = std::min(s.topk, visible);
    std::iota(order.begin(), order.begin() + visible, 0);
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + visible, [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    std::sort(order.begin(), order.begin() + k);
    int32_t* out = picks.data() + r * s.topk;
    for (int64_t j = 0; j < s.topk; ++j) out[j] = j < k ? order[j] : -1;
  }
}

}  // namespace dayzero::model::blocks
