// Plain double-precision twins of the vision layers, for tests that hold a whole tower against
// a straightforward implementation (llava_test's CLIP, moonvit_test's MoonViT). Loops written
// out, no kernels, no backend: what the runtime computes, spelled the obvious way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dayzero::model::plain {

using Mat = std::vector<double>;  // row-major

// y [rows, out] = x [rows, in] · W[w_row0 : w_row0 + out]^T (+ b[w_row0 : w_row0 + out] when b is
// not empty): w_row0 picks a section of a fused weight.
inline Mat linear(const Mat& x, int64_t rows, int64_t in, const std::vector<float>& w, const std::vector<float>& b,
                  int64_t out, int64_t w_row0 = 0) {
  Mat y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0 : b[w_row0 + o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[(w_row0 + o) * in + i];
      y[r * out + o] = s;
    }
  return y;
}

inline Mat layer_norm(const Mat& x, int64_t rows, int64_t d, const std::vector<float>& w, const std::vector<float>& b,
                      double eps) {
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) m += x[r * d + i];
    m /= d;
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - m) * (x[r * d + i] - m);
    var /= d;
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = (x[r * d + i] - m) / std::sqrt(var + eps) * w[i] + b[i];
  }
  return y;
}

// Bidirectional softmax attention: q, k, v [n, heads * hd] -> [n, heads * hd], scale 1/sqrt(hd).
inline Mat attention(const Mat& q, const Mat& k, const Mat& v, int64_t n, int64_t heads, int64_t hd) {
  const int64_t d = heads * hd;
  Mat att(n * d, 0.0);
  for (int64_t hh = 0; hh < heads; ++hh)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> sc(n);
      double mx = -1e300, sum = 0;
      for (int64_t s = 0; s < n; ++s) {
        double dot = 0;
        for (int64_t e = 0; e < hd; ++e) dot += q[t * d + hh * hd + e] * k[s * d + hh * hd + e];
        sc[s] = dot / std::sqrt(double(hd));
        mx = std::max(mx, sc[s]);
      }
      for (auto& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t s = 0; s < n; ++s)
        for (int64_t e = 0; e < hd; ++e) att[t * d + hh * hd + e] += sc[s] / sum * v[s * d + hh * hd + e];
    }
  return att;
}

// Relative L2 of got [want.size()] against want.
inline double rel_l2(const float* got, const Mat& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace dayzero::model::plain
