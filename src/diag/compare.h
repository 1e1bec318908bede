// Metrics that compare two float tensors or two logit vectors: pure functions over spans,
// accumulated in double, with no knowledge of runs, files or tolerances (compare_run.h uses
// them). Side a is the reference: relative figures divide by a's magnitude.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

namespace dayzero::diag {

// A metric with no finite value (one side missing, a zero reference).
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Per-element relative errors below this scale floor do not count: |a-b| / max(|a|, |b|, floor)
// with floor = kRelFloor * rms(a), so elements that sit at the noise level of a tensor do not
// dominate the shares above 1e-3 and 5e-3.
inline constexpr double kRelFloor = 1e-3;

struct TensorMetrics {
  int64_t n = 0;              // elements compared
  double cosine = 1;          // Σab / sqrt(Σa² Σb²); 1 when both are zero, 0 when only one is
  double rel_diff = 0;        // 1 - 2Σab / (Σa² + Σb²); 0 when both are zero
  double max_abs = 0;         // max |a - b|
  double mean_abs = 0;        // mean |a - b|
  double max_rel = 0;         // max |a - b| / max(|a|, |b|, kRelFloor * rms(a))
  double rel_l2 = 0;          // ||b - a|| / ||a||; 0 when equal, +inf when only a is zero
  double frac_rel_1e3 = 0;    // share of elements with relative error > 1e-3
  double frac_rel_5e3 = 0;    // share of elements with relative error > 5e-3
  int64_t nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
  int64_t worst_index = 0;    // flat index of the largest |a - b| (a NaN difference wins)
  int64_t worst_row = 0;      // worst_index / width: the token position (or decode step)
  int64_t worst_col = 0;      // worst_index % width: the channel
  float worst_a = 0, worst_b = 0;
};

// REQUIRES: a.size() == b.size(), width > 0 divides it. Non-finite elements (either side) are
// counted and excluded from every sum; a position where exactly one side is non-finite is an
// infinite error (max_abs, max_rel and rel_l2 become +inf). Bit-identical inputs give every
// error exactly 0 and cosine exactly 1.
TensorMetrics compare_tensors(std::span<const float> a, std::span<const float> b, int64_t width);

// Relative error of two stats vectors (dump/schema.h kStatsFields order: min, max, mean, std,
// abs_max, l2, nan_count, inf_count): the largest over the first six fields of |a-b| / scale,
// scale = max(|a_f|, std_a) for the first five and |a_l2| for l2 (0/0 counts 0); +inf when the
// nan or inf counts differ. REQUIRES: a.size() == b.size() == 8.
double compare_stats(std::span<const double> a, std::span<const double> b);

// The share of rows (of width k) whose sets of ids differ; ids in a row are compared as a set,
// since a router's order among its chosen experts changes no result. REQUIRES: same sizes, k > 0.
double id_set_mismatch(std::span<const float> a, std::span<const float> b, int64_t k);

struct LogitMetrics {
  double nmse = 0;       // Σ(a-b)² / Σa²
  double kl = 0;         // KL(softmax(a) || softmax(b)) in nats
  bool top1_agree = true;
  double top5_overlap = 1;  // |top5(a) ∩ top5(b)| / 5 (or / n when n < 5)
  int64_t top1_a = 0, top1_b = 0;
};

// REQUIRES: a.size() == b.size() > 0. Non-finite logits make nmse and kl +inf.
LogitMetrics compare_logits(std::span<const float> a, std::span<const float> b);

}  // namespace dayzero::diag
