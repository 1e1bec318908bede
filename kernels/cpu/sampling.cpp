// argmax and log_softmax_at (ops.h): the two reductions over a logits row that decoding
// and scoring need. Not a sampler: temperature/top-k live with the caller.
#include <cmath>

#include "core/check.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

int64_t argmax(int64_t n, const float* x) {
  DZ_CHECK(n > 0, "argmax of an empty row");
  // Strict > keeps the lowest index on ties. A NaN never wins against a number (a row of
  // NaN returns 0); callers that must reject NaN logits check for them.
  int64_t best = 0;
  float best_value = x[0];
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > best_value || (std::isnan(best_value) && !std::isnan(x[i]))) {
      best = i;
      best_value = x[i];
    }
  }
  return best;
}

double log_softmax_at(int64_t n, const float* x, int64_t i) {
  DZ_CHECK(n > 0 && i >= 0 && i < n, "log_softmax_at index " << i << " of " << n);
  double max_value = x[0];
  for (int64_t j = 1; j < n; ++j) max_value = std::fmax(max_value, double(x[j]));
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(double(x[j]) - max_value);
  return double(x[i]) - max_value - std::log(sum);
}

}  // namespace dayzero::kernels::cpu
