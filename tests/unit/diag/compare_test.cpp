// The compare metrics (diag/compare.h) against naive double loops written out here, the
// forward order and unit names of dump points, and the tolerance presets and override file.
// Not the run-level comparison (tests/e2e/compare_test.cpp does that on real runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "diag/compare.h"
#include "diag/compare_run.h"
#include "diag/compare_tolerance.h"
#include "dump/schema.h"

namespace dayzero::diag {
namespace {

constexpr uint32_t kSeed = 7;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// The naive double-precision definitions, written independently of compare.cpp.
struct Naive {
  double cosine, rel_diff, max_abs, mean_abs, max_rel, rel_l2, f3, f5;
  int64_t worst;
};
Naive naive(const std::vector<float>& a, const std::vector<float>& b) {
  double aa = 0, bb = 0, ab = 0, dd = 0, sa = 0, mx = -1, mr = 0;
  int64_t worst = 0, n3 = 0, n5 = 0;
  for (size_t i = 0; i < a.size(); ++i) aa += double(a[i]) * a[i];
  const double floor = 1e-3 * std::sqrt(aa / a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i], d = std::fabs(x - y);
    bb += y * y, ab += x * y, dd += d * d, sa += d;
    if (d > mx) mx = d, worst = static_cast<int64_t>(i);
    const double r = d / std::max({std::fabs(x), std::fabs(y), floor});
    mr = std::max(mr, r);
    n3 += r > 1e-3, n5 += r > 5e-3;
  }
  return {ab / std::sqrt(aa * bb), 1 - 2 * ab / (aa + bb), mx, sa / a.size(), mr, std::sqrt(dd / aa),
          double(n3) / a.size(), double(n5) / a.size(), worst};
}

TEST(CompareTensors, MatchesNaiveDoubleLoop) {
  for (float noise : {1e-7f, 1e-4f, 1e-2f, 1.0f}) {
    const int64_t rows = 7, width = 33;
    const std::vector<float> a = randn(rows * width, kSeed);
    std::vector<float> b = randn(rows * width, kSeed + 1, noise);
    for (size_t i = 0; i < b.size(); ++i) b[i] += a[i];
    const TensorMetrics m = compare_tensors(a, b, width);
    const Naive n = naive(a, b);
    SCOPED_TRACE(testing::Message() << "seed " << kSeed << ", noise " << noise);
    EXPECT_NEAR(m.cosine, n.cosine, 1e-12);
    EXPECT_NEAR(m.rel_diff, n.rel_diff, 1e-12 + 1e-9 * std::fabs(n.rel_diff));
    EXPECT_DOUBLE_EQ(m.max_abs, n.max_abs);
    EXPECT_NEAR(m.mean_abs, n.mean_abs, 1e-12 * n.mean_abs);
    EXPECT_NEAR(m.max_rel, n.max_rel, 1e-12 * n.max_rel);
    EXPECT_NEAR(m.rel_l2, n.rel_l2, 1e-12 * n.rel_l2);
    EXPECT_DOUBLE_EQ(m.frac_rel_1e3, n.f3);
    EXPECT_DOUBLE_EQ(m.frac_rel_5e3, n.f5);
    EXPECT_EQ(m.worst_index, n.worst);
    EXPECT_EQ(m.worst_row, n.worst / width);
    EXPECT_EQ(m.worst_col, n.worst % width);
    EXPECT_EQ(m.n, rows * width);
  }
}

TEST(CompareTensors, ABlockWithANanAgreesWithTheVectorBlocks) {
  // 5000 elements: vector blocks of 1024, one of them holding a NaN on both sides (measured by
  // the scalar loop), and a scalar tail. Equals the naive loop over the same values without it.
  const size_t n = 5000, nan_at = 3000;
  const std::vector<float> a0 = randn(n, kSeed);
  std::vector<float> b0 = randn(n, kSeed + 1, 1e-3f);
  for (size_t i = 0; i < n; ++i) b0[i] += a0[i];
  std::vector<float> a = a0, b = b0;
  a[nan_at] = b[nan_at] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a1 = a0, b1 = b0;
  a1.erase(a1.begin() + nan_at);
  b1.erase(b1.begin() + nan_at);
  const TensorMetrics m = compare_tensors(a, b, 100);
  const Naive r = naive(a1, b1);
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  EXPECT_EQ(m.nan_a, 1);
  EXPECT_NEAR(m.cosine, r.cosine, 1e-12);
  EXPECT_NEAR(m.rel_l2, r.rel_l2, 1e-12 * r.rel_l2);
  EXPECT_NEAR(m.mean_abs, r.mean_abs, 1e-12 * r.mean_abs);
  EXPECT_DOUBLE_EQ(m.max_abs, r.max_abs);
  EXPECT_NEAR(m.max_rel, r.max_rel, 1e-12 * r.max_rel);
  EXPECT_EQ(m.worst_index, r.worst >= static_cast<int64_t>(nan_at) ? r.worst + 1 : r.worst);
  EXPECT_DOUBLE_EQ(m.frac_rel_1e3 * n, r.f3 * (n - 1));
}

TEST(CompareTensors, IdenticalInputsAreExact) {
  const std::vector<float> a = randn(640, kSeed);
  const TensorMetrics m = compare_tensors(a, a, 64);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.rel_diff, 0.0);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.mean_abs, 0.0);
  EXPECT_EQ(m.max_rel, 0.0);
  EXPECT_EQ(m.rel_l2, 0.0);
  EXPECT_EQ(m.frac_rel_1e3, 0.0);
}

TEST(CompareTensors, LocatesTheLargestErrorByRowAndChannel) {
  std::vector<float> a = randn(5 * 16, kSeed), b = a;
  b[3 * 16 + 11] += 0.5f;
  const TensorMetrics m = compare_tensors(a, b, 16);
  EXPECT_EQ(m.worst_row, 3);
  EXPECT_EQ(m.worst_col, 11);
  EXPECT_FLOAT_EQ(m.worst_b - m.worst_a, 0.5f);
  EXPECT_DOUBLE_EQ(m.frac_rel_1e3, 1.0 / 80);
}

TEST(CompareTensors, CountsNonFiniteAndTreatsOneSidedAsInfinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> a = {1, 2, nan, 4}, b = {1, 2, nan, 4};
  TensorMetrics m = compare_tensors(a, b, 2);
  EXPECT_EQ(m.nan_a, 1);
  EXPECT_EQ(m.nan_b, 1);
  EXPECT_EQ(m.rel_l2, 0.0) << "NaN at the same place on both sides is counted, not an error";
  b[3] = inf;
  m = compare_tensors(a, b, 2);
  EXPECT_EQ(m.inf_b, 1);
  EXPECT_TRUE(std::isinf(m.rel_l2));
  EXPECT_TRUE(std::isinf(m.max_abs));
  EXPECT_EQ(m.worst_row, 1);
  EXPECT_EQ(m.worst_col, 1);
}

TEST(CompareLogits, MatchesNaiveKlAndNmse) {
  const std::vector<float> a = randn(300, kSeed, 3);
  std::vector<float> b = randn(300, kSeed + 2, 0.01f);
  for (size_t i = 0; i < b.size(); ++i) b[i] += a[i];
  double za = 0, zb = 0, aa = 0, dd = 0;
  for (size_t i = 0; i < a.size(); ++i) za += std::exp(double(a[i])), zb += std::exp(double(b[i]));
  double kl = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double p = std::exp(double(a[i])) / za, q = std::exp(double(b[i])) / zb;
    kl += p * std::log(p / q);
    aa += double(a[i]) * a[i], dd += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  }
  const LogitMetrics m = compare_logits(a, b);
  EXPECT_NEAR(m.kl, kl, 1e-9 * kl + 1e-15);
  EXPECT_NEAR(m.nmse, dd / aa, 1e-12 * dd / aa);
  const LogitMetrics same = compare_logits(a, a);
  EXPECT_EQ(same.kl, 0.0);
  EXPECT_EQ(same.nmse, 0.0);
  EXPECT_TRUE(same.top1_agree);
  EXPECT_EQ(same.top5_overlap, 1.0);
}

TEST(CompareLogits, TopAgreement) {
  std::vector<float> a = {0, 9, 8, 7, 6, 5, 1, 2}, b = a;
  std::swap(b[1], b[2]);  // top-1 changes, top-5 set does not
  LogitMetrics m = compare_logits(a, b);
  EXPECT_FALSE(m.top1_agree);
  EXPECT_EQ(m.top1_a, 1);
  EXPECT_EQ(m.top1_b, 2);
  EXPECT_EQ(m.top5_overlap, 1.0);
  b[5] = -1;  // 5 leaves b's top-5, 7 (value 2) enters
  m = compare_logits(a, b);
  EXPECT_DOUBLE_EQ(m.top5_overlap, 0.8);
}

TEST(IdSetMismatch, OrderInsideARowDoesNotCount) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {2, 1, 3, 4, 5, 7};
  EXPECT_DOUBLE_EQ(id_set_mismatch(a, b, 2), 1.0 / 3);
  EXPECT_EQ(id_set_mismatch(a, a, 2), 0.0);
}

TEST(CompareStats, RelativeToTheFieldOrTheSpread) {
  const std::vector<double> a = {-2, 3, 0.01, 1, 3, 10, 0, 0};
  std::vector<double> b = a;
  EXPECT_EQ(compare_stats(a, b), 0.0);
  b[2] = 0.02;  // mean off by 0.01 with std 1: relative to the spread, not to the tiny mean
  EXPECT_NEAR(compare_stats(a, b), 0.01, 1e-12);
  b = a;
  b[5] = 10.1;
  EXPECT_NEAR(compare_stats(a, b), 0.01, 1e-12);
  b = a;
  b[6] = 1;
  EXPECT_TRUE(std::isinf(compare_stats(a, b)));
}

TEST(ForwardOrder, FollowsTheForwardPass) {
  std::vector<std::string> names = {"logits", "layers.10.attn_norm", "layers.2.layer_out", "final_norm",
                                    "layers.2.ffn_out", "layers.2.topk_ids", "layers.2.router_logits",
                                    "layers.2.ffn_norm", "layers.2.attn_out", "layers.2.attn_norm", "embed",
                                    "merged_embed", "projector_out", "vision.layers.1.layer_out"};
  std::sort(names.begin(), names.end(), forward_before);
  const std::vector<std::string> want = {"vision.layers.1.layer_out", "projector_out", "merged_embed", "embed",
                                         "layers.2.attn_norm", "layers.2.attn_out", "layers.2.ffn_norm",
                                         "layers.2.router_logits", "layers.2.topk_ids", "layers.2.ffn_out",
                                         "layers.2.layer_out", "layers.10.attn_norm", "final_norm", "logits"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(unit_of("layers.12.ffn_out"), "layers.12");
  EXPECT_EQ(unit_of("vision.layers.3.layer_out"), "vision.layers.3");
  EXPECT_EQ(unit_of("final_norm"), "final_norm");
}

TEST(Tolerance, PresetsFileOverridesAndDtypes) {
  auto f32 = tolerance_preset("f32");
  ASSERT_TRUE(f32.ok());
  EXPECT_LT(f32->base.rel_l2, 1e-5);
  EXPECT_FALSE(tolerance_preset("fp16").ok());
  EXPECT_EQ(preset_for_dtype("bfloat16"), "bf16");
  EXPECT_EQ(preset_for_dtype("float8_e4m3fn"), "fp8");
  EXPECT_EQ(preset_for_dtype("float32"), "f32");
  EXPECT_EQ(looser_preset("f32", "bf16"), "bf16");
  EXPECT_EQ(looser_preset("fp8", "bf16"), "fp8");

  const auto dir = std::filesystem::temp_directory_path() / "dz-diag-compare-test";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "tol.yaml").string();
  std::ofstream(path) << "preset: bf16\npoints:\n  default: {rel_l2: 0.02}\n  ffn_out: {rel_l2: 0.05}\n"
                         "  layers.3.ffn_out: {rel_l2: 0.1}\noutputs: {logits_kl: 0.5}\n";
  auto t = load_tolerance_file(path, "f32");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->for_name("layers.1.attn_out").rel_l2, 0.02);
  EXPECT_EQ(t->for_name("layers.1.ffn_out").rel_l2, 0.05);
  EXPECT_EQ(t->for_name("layers.3.ffn_out").rel_l2, 0.1);
  EXPECT_EQ(t->outputs.logits_kl, 0.5);
  EXPECT_EQ(t->outputs.logits_nmse, tolerance_preset("bf16")->outputs.logits_nmse);
  std::ofstream(path) << "points:\n  ffn_out: {rel_l3: 0.05}\n";
  auto bad = load_tolerance_file(path, "f32");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("points.ffn_out.rel_l3"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace dayzero::diag

namespace dayzero::diag {
namespace {

dump::OutputRecord output(std::vector<int32_t> generated, std::vector<float> topk_logits) {
  dump::OutputRecord r;
  r.prompt_id = "p";
  r.generated_ids = std::move(generated);
  r.logits_last = {0.5f, 2.0f, -1.0f, 0.25f, 1.0f, 0.0f};
  r.topk = 2;
  r.step_topk_logits = std::move(topk_logits);
  return r;
}

TEST(CompareOutputs, ANearTieIsToldApartFromARealDifference) {
  const OutputTolerance tol = tolerance_preset("f32")->outputs;
  // Step 1 chose between two logits 1e-6 apart: a tie at f32 (near_tie 1e-5 of the top logit).
  const dump::OutputRecord a = output({4, 7, 9}, {3.0f, 1.0f, 2.0f, 1.999998f, 2.5f, 1.0f});
  dump::OutputRecord b = a;
  b.generated_ids = {4, 8, 1};
  OutputResult o = compare_outputs(a, b, tol);
  EXPECT_EQ(o.first_diff, 1);
  EXPECT_TRUE(o.near_tie);
  EXPECT_TRUE(o.pass) << o.reasons.front();
  // The same difference where the gap is 0.5: a regression.
  dump::OutputRecord c = output({4, 7, 9}, {3.0f, 1.0f, 2.0f, 1.5f, 2.5f, 1.0f});
  dump::OutputRecord d = c;
  d.generated_ids = {4, 8, 1};
  o = compare_outputs(c, d, tol);
  EXPECT_EQ(o.first_diff, 1);
  EXPECT_FALSE(o.near_tie);
  EXPECT_FALSE(o.pass);
  EXPECT_NEAR(o.tie_gap, 0.5, 1e-6);
  // Identical outputs: exact.
  o = compare_outputs(a, a, tol);
  EXPECT_EQ(o.first_diff, -1);
  EXPECT_TRUE(o.pass);
  EXPECT_EQ(o.logits.kl, 0.0);
  EXPECT_EQ(o.logits.nmse, 0.0);
  // A reference NLL that moved.
  dump::OutputRecord e = a, f = a;
  e.reference_nll = 2.0;
  f.reference_nll = 2.1;
  EXPECT_FALSE(compare_outputs(e, f, tol).pass);
}

}  // namespace
}  // namespace dayzero::diag
