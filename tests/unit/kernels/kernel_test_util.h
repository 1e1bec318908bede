// Helpers for the kernel tests: seeded inputs and one comparison, relative L2 error
// against a plain-loop twin with the tolerance chosen by the caller. A failure names the
// case, the seed, the error and the first mismatching elements with their indices.
// Not a test framework: each test picks its own tolerance, and writes its own twin except for the
// GEMM's, which the f32 and bf16 GEMM tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace dayzero::kernels::test {

// The GEMM's plain-loop twin: y[m, n] = x[m, k] · w[n, k]^T (+ y), double accumulation.
inline std::vector<float> matmul_nt_twin(int64_t m, int64_t n, int64_t k, const std::vector<float>& x,
                                         const std::vector<float>& w, std::vector<float> y, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = accumulate ? y[i * n + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * w[j * k + p];
      y[i * n + j] = static_cast<float>(s);
    }
  return y;
}

// Uniform in [lo, hi), reproducible from `seed` on every platform.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.0f;
  }
  return v;
}

// "[i, j, k]" of flat index `flat` in a row-major `shape`.
inline std::string unravel(size_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<int64_t>(flat % shape[d]);
    flat /= shape[d];
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

// Passes when ||got - want|| <= tol * ||want|| (absolute when want is all zero) and every
// element is finite where want is. Element i counts as a mismatch when it differs by more
// than tol * max(|want[i]|, rms(want)); the first five are listed.
inline ::testing::AssertionResult close(const std::string& what, const std::vector<float>& got,
                                        const std::vector<float>& want, const std::vector<int64_t>& shape,
                                        double tol, uint32_t seed) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  }
  double diff2 = 0, ref2 = 0;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    diff2 += d * d;
    ref2 += double(want[i]) * want[i];
    if (std::isfinite(want[i]) && !std::isfinite(got[i])) finite = false;
  }
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (finite && rel <= tol) return ::testing::AssertionSuccess();
  const double rms = std::sqrt(ref2 / std::max<size_t>(1, want.size()));
  std::ostringstream os;
  os << what << " (seed " << seed << "): relative L2 error " << rel << " > tolerance " << tol << "; first mismatches:";
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 5; ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (!(d <= tol * std::max<double>(std::fabs(want[i]), rms))) {
      os << " " << unravel(i, shape) << " got " << got[i] << " want " << want[i] << ";";
      ++shown;
    }
  }
  return ::testing::AssertionFailure() << os.str();
}

// ||got - want|| / ||want|| in double (for printing measured agreement and negative controls).
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    diff2 += d * d;
    ref2 += double(want[i]) * want[i];
  }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

// Bit-for-bit equality (same inputs, same thread count), naming the first difference.
inline ::testing::AssertionResult identical(const std::string& what, const std::vector<float>& a,
                                            const std::vector<float>& b, const std::vector<int64_t>& shape) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << what << ": first difference at " << unravel(i, shape) << ": "
                                           << a[i] << " vs " << b[i];
    }
  }
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  return ::testing::AssertionSuccess();
}

}  // namespace dayzero::kernels::test
