// Seeded sampling of a served request: temperature and top-p over the logits, drawn from a
// generator seeded by the request, so that every rank of the last stage draws the same token and
// the same request with the same seed gets the same tokens. Temperature 0 is the argmax of the
// runtime's greedy decode, bit for bit.
#pragma once

#include <cstdint>
#include <random>

namespace dayzero::serve {

class Sampler {
 public:
  // REQUIRES: temperature >= 0, 0 < top_p <= 1.
  Sampler(double temperature, double top_p, uint64_t seed) : temperature_(temperature), top_p_(top_p), rng_(seed) {}
  // The next token from logits [n_vocab].
  int32_t pick(const float* logits, int64_t n_vocab);

 private:
  double temperature_, top_p_;
  std::mt19937_64 rng_;
};

}  // namespace dayzero::serve
