// DeepSeek-V4's expert choice (v4_routing.h): scores, learned or hash selection, weights.
#include "model/blocks/v4_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace dayzero::model::blocks {

Result<Routing> route_v4(std::span<const float> logits, int64_t n_tokens, int64_t n_expert, std::span<const float> bias,
                         std::span<const int32_t> tid2eid, std::span<const int32_t> token_ids,
                         const V4RouterOptions& o) {
  const int64_t k = o.n_used;
  const bool hash = !tid2eid.empty();
  if (o.scoring != "sqrtsoftplus" && o.scoring != "softmax" && o.scoring != "sigmoid")
    return Status::Unsupported("deepseek_v4 router: scoring_func '" + o.scoring + "' is not supported");
  if (static_cast<int64_t>(logits.size()) != n_tokens * n_expert || k < 1 || k > n_expert ||
      (hash ? static_cast<int64_t>(token_ids.size()) != n_tokens || tid2eid.size() % k != 0
            : static_cast<int64_t>(bias.size()) != n_expert))
    return Status::InvalidArgument("deepseek_v4 router: sizes do not match " + std::to_string(n_tokens) + " tokens x " +
                                   std::to_string(n_expert) + " experts, top-" + std::to_string(k));
  const auto n_vocab = hash ? static_cast<int64_t>(tid2eid.size()) / k : 0;
  Routing r;
  r.ids.resize(n_tokens * k);
  r.weights.resize(n_tokens * k);
  std::vector<float> score(n_expert);
  std::vector<int32_t> order(n_expert);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* x = logits.data() + t * n_expert;
    if (o.scoring == "softmax") {
      const float mx = *std::max_element(x, x + n_expert);
      float sum = 0;
      for (int64_t e = 0; e < n_expert; ++e) sum += score[e] = std::exp(x[e] - mx);
      for (int64_t e = 0; e < n_expert; ++e) score[e] /= sum;
    } else {
      for (int64_t e = 0; e < n_expert; ++e)
        score[e] = o.scoring == "sigmoid" ? 1.0f / (1.0f + std::exp(-x[e]))
                                          // softplus as torch computes it (linear above 20)
                                          : std::sqrt(x[e] > 20.0f ? x[e] : std::log1p(std::exp(x[e])));
    }
    int32_t* ids = r.ids.data() + t * k;
    if (hash) {
      const int32_t tok = token_ids[t];
      if (tok < 0 || tok >= n_vocab)
        return Status::InvalidArgument("deepseek_v4 router: token id " + std::to_string(tok) + " (row " +
                                       std::to_string(t) + ") is outside tid2eid's " + std::to_string(n_vocab) + " rows");
      for (int64_t j = 0; j < k; ++j) {
        ids[j] = tid2eid[tok * k + j];
        if (ids[j] < 0 || ids[j] >= n_expert)
          return Status::InvalidArgument("deepseek_v4 router: tid2eid[" + std::to_string(tok) + "] names expert " +
                                         std::to_string(ids[j]) + " of " + std::to_string(n_expert));
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        const float ca = score[a] + bias[a], cb = score[b] + bias[b];
        return ca > cb || (ca == cb && a < b);
      });
      std::copy(order.begin(), order.begin() + k, ids);
    }
    float* w = r.weights.data() + t * k;
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += w[j] = score[ids[j]];
    for (int64_t j = 0; j < k; ++j) w[j] = w[j] / (sum + 1e-20f) * o.scaling;
  }
  return r;
}

}  // namespace dayzero::model::blocks
