// DeepSeek-V4's expert choice (transformers' DeepseekV4TopKRouter and DeepseekV4HashRouter): the
// router logits' scores by scoring_func (sqrtsoftplus = sqrt(softplus(x)), softmax, sigmoid); a
// learned layer picks the top n_used of score + selection bias, a hash-routed layer takes the
// frozen tid2eid row of each token's id; the chosen experts' unbiased scores are renormalised
// (sum + 1e-20, always: the reference does not read norm_topk_prob) and scaled by
// routed_scaling_factor. Host arrays; not the
// experts (blocks/moe.h runs them; blocks/v4_layer composes the two).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "model/blocks/moe.h"

namespace dayzero::model::blocks {

struct V4RouterOptions {
  std::string scoring = "sqrtsoftplus";  // sqrtsoftplus | softmax | sigmoid
  int64_t n_used = 0;
  float scaling = 1.0f;
};

// logits [n_tokens, n_expert]. Learned routing: bias [n_expert], token_ids empty; ids ordered by
// descending biased score, ties to the lower id. Hash routing: bias empty, tid2eid [n_vocab,
// n_used] (values in [0, n_expert)), token_ids [n_tokens]; ids in the table's order.
// InvalidArgument naming the token when a token id is outside the table or an entry outside the
// experts; Unsupported for another scoring function.
Result<Routing> route_v4(std::span<const float> logits, int64_t n_tokens, int64_t n_expert, std::span<const float> bias,
                         std::span<const int32_t> tid2eid, std::span<const int32_t> token_ids,
                         const V4RouterOptions& o);

}  // namespace dayzero::model::blocks
