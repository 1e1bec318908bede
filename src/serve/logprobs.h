// Log-probabilities a request asks for (completions `logprobs` / `echo`, chat `logprobs` /
// `top_logprobs`): the log-softmax of the model's logits (before any sampling adjustment) at a
// token, and its most likely alternatives. Computed on the last stage, where the logits are, and
// carried to the replica's first rank as doubles. Not the JSON shapes (http_front.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace dayzero::serve {

struct TokenLogprob {
  double logprob = 0;                 // of the token
  std::vector<int32_t> top_ids;       // [k] most likely first, the lower id first on a tie
  std::vector<double> top_logprobs;   // [k]
};

// The log-softmax of logits [n_vocab] at token and at the k most likely ids, in double precision:
// m = the largest logit, s = the sum over ids in order of exp(logit - m), and each
// log-probability is logit - (m + log(s)). This order of operations is the contract: the tests
// recompute it from the logits `dayzero run` dumps and expect the same bits.
TokenLogprob token_logprob(const float* logits, int64_t n_vocab, int32_t token, int k);

// The flat form that travels (1 + 2k doubles; ids are exact in a double) and back.
void append_flat(const TokenLogprob& lp, std::vector<double>* out);
TokenLogprob read_flat(const double* in, int k);
inline size_t flat_size(int k) { return 1 + 2 * static_cast<size_t>(k); }

}  // namespace dayzero::serve
