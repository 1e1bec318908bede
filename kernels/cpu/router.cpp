// MoE router top-k on the host (router.h): sorts by score with the tie rule of router.h.
// The code the MoE blocks ran before the router became a Backend op, unchanged in its
// arithmetic, so routed models give bit-identical results.
#include "kernels/cpu/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace dayzero::kernels::cpu {

void route_softmax_topk(int64_t n, int64_t n_expert, int64_t k, bool renormalize, const float* logits, int32_t* ids,
                        float* weights) {
  std::vector<float> p(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * n_expert;
    const float mx = *std::max_element(row, row + n_expert);
    float z = 0;
    for (int64_t e = 0; e < n_expert; ++e) z += (p[e] = std::exp(row[e] - mx));
    for (auto& v : p) v /= z;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = renormalize ? p[order[j]] / sum : p[order[j]];
    }
  }
}

void route_sigmoid_group_topk(int64_t n, int64_t n_expert, int64_t k, const GroupRoute& o, const float* logits,
                              const float* bias, int32_t* ids, float* weights) {
  const int64_t per_group = n_expert / o.n_group;
  std::vector<float> score(n_expert), choice(n_expert), group_score(o.n_group);
  std::vector<int32_t> order(n_expert), groups(o.n_group);
  std::vector<char> group_on(o.n_group);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * n_expert;
    for (int64_t e = 0; e < n_expert; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-row[e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    for (int64_t g = 0; g < o.n_group; ++g) {
      const float* c = choice.data() + g * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int64_t i = 0; i < per_group; ++i) {
        if (c[i] > best) {
          second = best;
          best = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      group_score[g] = per_group >= 2 ? best + second : best;
    }
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int32_t a, int32_t b) { return group_score[a] > group_score[b]; });
    std::fill(group_on.begin(), group_on.end(), 0);
    for (int64_t g = 0; g < o.topk_group; ++g) group_on[groups[g]] = 1;
    std::iota(order.begin(), order.end(), 0);
    const auto masked = [&](int32_t e) { return group_on[e / per_group] ? choice[e] : -INFINITY; };
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return masked(a) > masked(b); });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += score[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      const float w = o.renormalize ? score[order[j]] / (sum + 1e-20f) : score[order[j]];
      weights[t * k + j] = w * o.scaling;
    }
  }
}

}  // namespace dayzero::kernels::cpu
