// Compare metrics over float spans (compare.h): two passes in double, the first for a's
// scale (the relative-error floor), the second for everything else; both run in eight double
// lanes, with a scalar loop for blocks that hold a non-finite value.
#include "diag/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace dayzero::diag {
namespace {

bool finite(float x) { return std::isfinite(x); }

// Eight double lanes (GCC/Clang vector extensions: AVX-512, AVX2 or SSE2, whatever the target
// has). The sums of compare_tensors run in these lanes, so their order differs from a plain
// left-to-right loop by the grouping only (element i goes to lane i % 8; the lanes are added
// pairwise at the end), a difference of float rounding.
constexpr size_t kLanes = 8;
constexpr size_t kBlock = 1024;  // elements per finiteness check; a multiple of kLanes
using D8 = double __attribute__((vector_size(64)));
using F8 = float __attribute__((vector_size(32)));
using I8 = int64_t __attribute__((vector_size(64)));
constexpr double kMaxFinite = std::numeric_limits<float>::max();

D8 load8(const float* p) {
  F8 f;
  std::memcpy(&f, p, sizeof f);
  return __builtin_convertvector(f, D8);
}
D8 fabs8(D8 x) { return x < 0 ? -x : x; }
double lane_sum(const double (&v)[kLanes]) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

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
  const size_t n = a.size();
  const size_t n_vec = n / kLanes * kLanes;

  // Pass 1: a's scale. Element i goes to lane i % kLanes (pass 2 uses the same lanes, so equal
  // inputs give bit-equal Σa², Σab and Σb²).
  D8 vaa = {};
  I8 vfin = {};
  for (size_t i = 0; i < n_vec; i += kLanes) {
    const D8 x = load8(a.data() + i);
    const I8 ok = fabs8(x) <= kMaxFinite;
    vaa += ok ? x * x : D8{};
    vfin -= ok;  // a true lane is -1
  }
  double aa_lane[kLanes];
  int64_t n_finite_a = 0;
  for (size_t k = 0; k < kLanes; ++k) aa_lane[k] = vaa[k], n_finite_a += vfin[k];
  for (size_t i = n_vec; i < n; ++i)
    if (finite(a[i])) aa_lane[i % kLanes] += static_cast<double>(a[i]) * a[i], ++n_finite_a;
  const double saa = lane_sum(aa_lane);
  const double floor = n_finite_a ? kRelFloor * std::sqrt(saa / n_finite_a) : 0;

  // Pass 2, in blocks: a block whose elements are all finite runs the vector loop; any other
  // block (and the tail) runs the scalar loop into the same lanes.
  D8 vab = {}, vbb = {}, vdd = {}, vsum = {}, vrel = {};
  I8 v3 = {}, v5 = {};
  double ab_lane[kLanes] = {}, bb_lane[kLanes] = {}, dd_lane[kLanes] = {}, sum_lane[kLanes] = {};
  int64_t n_both = 0, n_rel_1e3 = 0, n_rel_5e3 = 0;
  double worst = -1;
  bool one_sided = false;
  const auto scalar_element = [&](size_t i) {
    const float x = a[i], y = b[i];
    const size_t k = i % kLanes;
    if (std::isnan(x)) ++m.nan_a;
    if (std::isinf(x)) ++m.inf_a;
    if (std::isnan(y)) ++m.nan_b;
    if (std::isinf(y)) ++m.inf_b;
    double d;
    if (finite(x) && finite(y)) {
      const double xd = x, yd = y;
      d = std::fabs(xd - yd);
      ab_lane[k] += xd * yd;
      bb_lane[k] += yd * yd;
      dd_lane[k] += d * d;
      sum_lane[k] += d;
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
  };
  const D8 vfloor = D8{} + floor;
  for (size_t b0 = 0; b0 < n_vec; b0 += kBlock) {
    const size_t b1 = std::min(n_vec, b0 + kBlock);
    I8 bad = {};
    for (size_t i = b0; i < b1; i += kLanes)
      bad |= (fabs8(load8(a.data() + i)) > kMaxFinite) | (fabs8(load8(b.data() + i)) > kMaxFinite) |
             (load8(a.data() + i) != load8(a.data() + i)) | (load8(b.data() + i) != load8(b.data() + i));
    bool any_bad = false;
    for (size_t k = 0; k < kLanes; ++k) any_bad |= bad[k] != 0;
    if (any_bad) {
      for (size_t i = b0; i < b1; ++i) scalar_element(i);
      continue;
    }
    D8 vmax = D8{} - 1;
    for (size_t i = b0; i < b1; i += kLanes) {
      const D8 x = load8(a.data() + i), y = load8(b.data() + i);
      const D8 d = fabs8(x - y);
      vab += x * y;
      vbb += y * y;
      vdd += d * d;
      vsum += d;
      const D8 ax = fabs8(x), ay = fabs8(y);
      D8 den = ax > ay ? ax : ay;
      den = den > vfloor ? den : vfloor;
      const D8 rel = den > 0 ? d / den : D8{};
      vrel = rel > vrel ? rel : vrel;
      v3 -= rel > 1e-3;
      v5 -= rel > 5e-3;
      vmax = d > vmax ? d : vmax;
    }
    n_both += static_cast<int64_t>(b1 - b0);
    double block_max = -1;
    for (size_t k = 0; k < kLanes; ++k) block_max = std::max(block_max, vmax[k]);
    if (block_max > worst) {  // the first element of the block holding it, as the scalar loop finds
      for (size_t i = b0; i < b1; ++i)
        if (std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])) == block_max) {
          worst = block_max;
          m.worst_index = static_cast<int64_t>(i);
          break;
        }
    }
  }
  for (size_t i = n_vec; i < n; ++i) scalar_element(i);
  for (size_t k = 0; k < kLanes; ++k) {
    ab_lane[k] += vab[k];
    bb_lane[k] += vbb[k];
    dd_lane[k] += vdd[k];
    sum_lane[k] += vsum[k];
    m.max_rel = std::max(m.max_rel, vrel[k]);
    n_rel_1e3 += v3[k];
    n_rel_5e3 += v5[k];
  }
  const double sab = lane_sum(ab_lane), sbb = lane_sum(bb_lane), sdd = lane_sum(dd_lane), sum_abs = lane_sum(sum_lane);
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
