// Dump schema paths and the stats vector.
#include "dump/schema.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dayzero::dump {

std::string activation_path(const std::string& prompt_id, const std::string& phase,
                            const std::string& name) {
  return "/activations/" + prompt_id + "/" + phase + "/" + name;
}

std::string output_path(const std::string& prompt_id) { return "/outputs/" + prompt_id; }

std::array<double, 8> activation_stats(const float* data, int64_t n) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  double sum = 0, sum_sq = 0, abs_max = 0;
  int64_t finite = 0, nans = 0, infs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = data[i];
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    if (std::isinf(v)) {
      ++infs;
      continue;
    }
    ++finite;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
    abs_max = std::max(abs_max, std::fabs(v));
  }
  if (finite == 0) return {nan, nan, nan, nan, 0.0, 0.0, double(nans), double(infs)};
  const double mean = sum / double(finite);
  // Second pass for the variance: sum_sq/n - mean^2 cancels badly on large offsets.
  double dev_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = data[i];
    if (std::isfinite(v)) dev_sq += (v - mean) * (v - mean);
  }
  return {lo,           hi,
          mean,         std::sqrt(dev_sq / double(finite)),
          abs_max,      std::sqrt(sum_sq),
          double(nans), double(infs)};
}

}  // namespace dayzero::dump
