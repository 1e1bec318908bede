// Compare metrics over float spans (compare.h): two passes in double, the first for a's
// scale (the relative-error floor), the second for everything else.
#include "diag/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace dayzero::diag {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool finite(float x) { return std::isfinite(x); }

// Indices of the k largest values, ties to the lower index.
std::vector<int64_t> top_indices(std::span<const float> v, int64_t k) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(v.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t x, int64_t y) {
    return v[x] > v[y] || (v[x] == v[y] && x < y);
  });
  idx.resize(k);
  return idx;
}

}  // namespace

TensorMetrics compare_tensors(std::span<const float> a, std::span<const float> b, int64_t width) {
  TensorMetrics m;
  m.n = static_cast<int64_t>(a.size());
  double saa = 0;
  int64_t n_finite_a = 0;
  for (float x : a)
    if (finite(x)) saa += static_cast<double>(x) * x, ++n_finite_a;
  const double floor = n_finite_a ? kRelFloor * std::sqrt(saa / n_finite_a) : 0;

  double sab = 0, sbb = 0, sdd = 0, sum_abs = 0;
  int64_t n_both = 0, n_rel_1e3 = 0, n_rel_5e3 = 0;
  double worst = -1;
  bool one_sided = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const float x = a[i], y = b[i];
    if (std::isnan(x)) ++m.nan_a;
    if (std::isinf(x)) ++m.inf_a;
    if (std::isnan(y)) ++m.nan_b;
    if (std::isinf(y)) ++m.inf_b;
    double d;
    if (finite(x) && finite(y)) {
      const double xd = x, yd = y;
      d = std::fabs(xd - yd);
      sab += xd * yd;
      sbb += yd * yd;
      sdd += d * d;
      sum_abs += d;
      ++n_both;
      const double den = std::max({std::fabs(xd), std::fabs(yd), floor});
      const double rel = den > 0 ? d / den : 0;
      m.max_rel = std::max(m.max_rel, rel);
      if (rel > 1e-3) ++n_rel_1e3;
      if (rel > 5e-3) ++n_rel_5e3;
    } else if (finite(x) != finite(y) || (std::isinf(x) && std::isinf(y) && x != y)) {
      d = kInf;
      one_sided = true;
      ++n_rel_1e3, ++n_rel_5e3;
    } else {
      d = 0;  // both NaN, or the same infinity: counted, not an error
    }
    if (d > worst) {
      worst = d;
      m.worst_index = static_cast<int64_t>(i);
    }
  }
  if (!a.empty()) {
    m.worst_row = m.worst_index / width;
    m.worst_col = m.worst_index % width;
    m.worst_a = a[m.worst_index];
    m.worst_b = b[m.worst_index];
  }
  m.max_abs = std::max(worst, 0.0);
  m.mean_abs = n_both ? sum_abs / n_both : 0;
  if (saa == 0 && sbb == 0) {
    m.cosine = 1;
    m.rel_diff = 0;
  } else {
    m.cosine = (saa == 0 || sbb == 0) ? 0 : sab / std::sqrt(saa * sbb);
    m.rel_diff = 1 - 2 * sab / (saa + sbb);
  }
  m.rel_l2 = sdd == 0 ? 0 : saa == 0 ? kInf : std::sqrt(sdd / saa);
  if (one_sided) m.max_rel = m.rel_l2 = kInf;
  m.frac_rel_1e3 = m.n ? static_cast<double>(n_rel_1e3) / m.n : 0;
  m.frac_rel_5e3 = m.n ? static_cast<double>(n_rel_5e3) / m.n : 0;
  return m;
}

double compare_stats(std::span<const double> a, std::span<const double> b) {
  if (a[6] != b[6] || a[7] != b[7]) return kInf;
  double worst = 0;
  for (int f = 0; f < 6; ++f) {
    if (std::isnan(a[f]) && std::isnan(b[f])) continue;  // no finite value on either side
    const double d = std::fabs(a[f] - b[f]);
    if (std::isnan(d)) return kInf;
    const double scale = f < 5 ? std::max(std::fabs(a[f]), std::fabs(a[3])) : std::fabs(a[5]);
    if (d == 0) continue;
    worst = std::max(worst, scale > 0 ? d / scale : kInf);
  }
  return worst;
}

double id_set_mismatch(std::span<const float> a, std::span<const float> b, int64_t k) {
  const int64_t rows = static_cast<int64_t>(a.size()) / k;
  if (rows == 0) return 0;
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::multiset<float> sa(a.begin() + r * k, a.begin() + (r + 1) * k);
    std::multiset<float> sb(b.begin() + r * k, b.begin() + (r + 1) * k);
    if (sa != sb) ++differ;
  }
  return static_cast<double>(differ) / rows;
}

LogitMetrics compare_logits(std::span<const float> a, std::span<const float> b) {
  LogitMetrics m;
  double saa = 0, sdd = 0;
  double max_a = -kInf, max_b = -kInf;
  bool bad = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!finite(a[i]) || !finite(b[i])) {
      bad = true;
      continue;
    }
    const double d = static_cast<double>(a[i]) - b[i];
    saa += static_cast<double>(a[i]) * a[i];
    sdd += d * d;
    max_a = std::max(max_a, static_cast<double>(a[i]));
    max_b = std::max(max_b, static_cast<double>(b[i]));
  }
  const std::vector<int64_t> ta = top_indices(a, 5), tb = top_indices(b, 5);
  m.top1_a = ta[0];
  m.top1_b = tb[0];
  m.top1_agree = ta[0] == tb[0];
  int64_t common = 0;
  for (int64_t x : ta) common += std::count(tb.begin(), tb.end(), x);
  m.top5_overlap = static_cast<double>(common) / ta.size();
  if (bad) {
    m.nmse = m.kl = kInf;
    return m;
  }
  m.nmse = sdd == 0 ? 0 : saa == 0 ? kInf : sdd / saa;
  // log-sum-exp of each side, then Σ p (log p - log q).
  double za = 0, zb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    za += std::exp(a[i] - max_a);
    zb += std::exp(b[i] - max_b);
  }
  const double lza = max_a + std::log(za), lzb = max_b + std::log(zb);
  double kl = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double lp = a[i] - lza, lq = b[i] - lzb;
    kl += std::exp(lp) * (lp - lq);
  }
  m.kl = std::max(kl, 0.0);
  return m;
}

}  // namespace dayzero::diag
