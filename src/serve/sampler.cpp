// Softmax at the temperature in double precision, the smallest set of most likely tokens whose
// mass reaches top_p (ties broken by the lower id), one uniform draw from the generator.
#include "serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/ops.h"

namespace dayzero::serve {

int32_t Sampler::pick(const float* logits, int64_t n_vocab) {
  if (temperature_ == 0) return static_cast<int32_t>(kernels::cpu::argmax(n_vocab, logits));
  const float top = *std::max_element(logits, logits + n_vocab);
  std::vector<double> p(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) p[i] = std::exp((static_cast<double>(logits[i]) - top) / temperature_);
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  size_t keep = 0;
  double mass = 0;
  while (keep < order.size() && (keep == 0 || mass < top_p_ * total)) mass += p[order[keep++]];
  // 53 random bits: the same double on every rank and every standard library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
  double c = 0;
  for (size_t k = 0; k < keep; ++k) {
    c += p[order[k]];
    if (u < c) return order[k];
  }
  return order[keep - 1];
}

}  // namespace dayzero::serve
