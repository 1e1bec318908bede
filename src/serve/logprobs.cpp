// Log-softmax in double with a fixed order of operations (logprobs.h), and its flat form.
#include "serve/logprobs.h"

#include <algorithm>
#include <cmath>

#include "runtime/generate.h"

namespace dayzero::serve {

TokenLogprob token_logprob(const float* logits, int64_t n_vocab, int32_t token, int k) {
  const double m = static_cast<double>(*std::max_element(logits, logits + n_vocab));
  double s = 0;
  for (int64_t i = 0; i < n_vocab; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(s);
  TokenLogprob out;
  out.logprob = static_cast<double>(logits[token]) - lse;
  k = static_cast<int>(std::min<int64_t>(k, n_vocab));
  out.top_ids.resize(static_cast<size_t>(k));
  std::vector<float> values(static_cast<size_t>(k));
  runtime::top_k(logits, n_vocab, k, out.top_ids.data(), values.data());
  for (int j = 0; j < k; ++j) out.top_logprobs.push_back(static_cast<double>(values[j]) - lse);
  return out;
}

void append_flat(const TokenLogprob& lp, std::vector<double>* out) {
  out->push_back(lp.logprob);
  for (size_t j = 0; j < lp.top_ids.size(); ++j) {
    out->push_back(static_cast<double>(lp.top_ids[j]));
    out->push_back(lp.top_logprobs[j]);
  }
}

TokenLogprob read_flat(const double* in, int k) {
  TokenLogprob lp;
  lp.logprob = in[0];
  for (int j = 0; j < k; ++j) {
    lp.top_ids.push_back(static_cast<int32_t>(in[1 + 2 * j]));
    lp.top_logprobs.push_back(in[2 + 2 * j]);
  }
  return lp;
}

}  // namespace dayzero::serve
