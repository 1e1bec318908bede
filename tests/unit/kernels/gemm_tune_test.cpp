// The start-up tuning of the small-M kernel: every setting it may choose gives the bits of the
// default one (m = 1 and small batches, f32 and bf16 weights, shapes with edges and scalar
// tails), so choosing by time cannot change a result; a tuning lists every candidate with its
// GB/s, sets the one it chose, and a second tuning of the same shapes reads the cache (a
// corrupt cache file is measured again). Speed itself is not asserted: decode_bench shows it.
// The choice among timed candidates (interleaved_choice) is checked on made-up times: drift
// between steps and one held-up call do not decide it.
// The large-M (prefill) path: timed over the paths that load, the choice set and cached, a
// switch taking effect in matmul_nt (each path's own bits), an unknown path refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tune.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

namespace fs = std::filesystem;
using cpu::gemm::SmallMSettings;
using test::identical;
using test::random_vector;

// Restores the process-wide settings when a test ends.
struct SettingsGuard {
  SmallMSettings saved = cpu::gemm::small_m_settings();
  ~SettingsGuard() { cpu::gemm::set_small_m_settings(saved); }
};

TEST(GemmTune, EverySettingGivesTheDefaultBits) {
  SettingsGuard guard;
  const int64_t n = 67, k = 1029;  // odd columns for every tile width, a scalar tail
  const auto w = random_vector(n * k, 21);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  for (int64_t m : {1, 3, 16}) {
    const auto x = random_vector(m * k, 22 + m);
    std::vector<float> want(m * n), want_b(m * n);
    cpu::gemm::set_small_m_settings(SmallMSettings{});
    cpu::matmul_nt(m, n, k, x.data(), w.data(), want.data());
    cpu::matmul_nt_bf16(m, n, k, x.data(), wb.data(), want_b.data());
    for (int rows = 1; rows <= 4; ++rows)
      for (int64_t pf : {0, 4096, 8192, 16384}) {
        cpu::gemm::set_small_m_settings({rows, pf});
        std::vector<float> got(m * n), got_b(m * n);
        cpu::matmul_nt(m, n, k, x.data(), w.data(), got.data());
        cpu::matmul_nt_bf16(m, n, k, x.data(), wb.data(), got_b.data());
        const std::string what = "m=" + std::to_string(m) + " 1x" + std::to_string(rows) + " prefetch " + std::to_string(pf);
        ASSERT_TRUE(identical(what + " f32", got, want, {m, n}));
        ASSERT_TRUE(identical(what + " bf16", got_b, want_b, {m, n}));
      }
  }
}

TEST(GemmTune, ChoosesAMeasuredCandidateAndCachesIt) {
  SettingsGuard guard;
  const fs::path dir = fs::temp_directory_path() / ("dayzero-gemm-tune-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto w1 = random_vector(512 * 768, 31), w2 = random_vector(256 * 2048, 32);
  const std::vector<cpu::gemm::TuneWeight> weights = {{512, 768, w1.data(), false}, {256, 2048, w2.data(), false}};
  const auto first = cpu::gemm::tune_small_m(weights, dir.string(), 0.05);
  EXPECT_EQ(first.source, "measured");
  ASSERT_EQ(first.candidates.size(), 12u);
  for (const auto& c : first.candidates) {
    EXPECT_TRUE(c.rejected.empty()) << c.settings.m1_rows << "/" << c.settings.m1_prefetch_bytes << ": " << c.rejected;
    EXPECT_GT(c.gb_s, 0);
  }
  EXPECT_EQ(cpu::gemm::small_m_settings().m1_rows, first.chosen.m1_rows);
  EXPECT_EQ(cpu::gemm::small_m_settings().m1_prefetch_bytes, first.chosen.m1_prefetch_bytes);
  std::printf("%s\n", first.describe().c_str());

  cpu::gemm::set_small_m_settings(SmallMSettings{});
  const auto again = cpu::gemm::tune_small_m(weights, dir.string(), 0.05);
  EXPECT_EQ(again.source.rfind("cached in ", 0), 0u) << again.source;
  EXPECT_EQ(again.chosen.m1_rows, first.chosen.m1_rows);
  EXPECT_EQ(again.chosen.m1_prefetch_bytes, first.chosen.m1_prefetch_bytes);
  EXPECT_EQ(cpu::gemm::small_m_settings().m1_rows, first.chosen.m1_rows);

  // Other shapes: another key. A corrupt file for these shapes is measured again.
  const std::vector<cpu::gemm::TuneWeight> other = {{512, 768, w1.data(), false}};
  const fs::path file = dir / ("gemm-small-m-" + cpu::gemm::small_m_cache_key(other) + ".txt");
  EXPECT_NE(cpu::gemm::small_m_cache_key(other), cpu::gemm::small_m_cache_key(weights));
  std::ofstream(file) << "chosen 9 -1\n";
  EXPECT_EQ(cpu::gemm::tune_small_m(other, dir.string(), 0.02).source, "measured");
  fs::remove_all(dir);
}

// Step times of three candidates over 150 steps (about two passes over the 72 weights a start-up
// on the 109 M model times) whose bandwidth drifts by up to 40 %, plus a little jitter of their own.
std::vector<std::vector<double>> drifting_steps(const std::vector<double>& base) {
  std::vector<std::vector<double>> steps;
  for (int i = 0; i < 150; ++i) {
    const double drift = 1.0 + 0.4 * std::sin(0.5 * i);
    std::vector<double> step;
    for (size_t u = 0; u < base.size(); ++u) {
      const double jitter = 0.01 * ((i * 7 + static_cast<int>(u) * 3) % 5 - 2);
      step.push_back(base[u] * drift * (1.0 + jitter));
    }
    steps.push_back(step);
  }
  return steps;
}

TEST(GemmTune, ChoiceComparesCandidatesAtTheSameMoments) {
  std::vector<double> secs;
  // Candidate 1 is 3 % faster than candidate 0 at every step; the steps drift far more.
  EXPECT_EQ(cpu::gemm::interleaved_choice(drifting_steps({1.00, 0.97, 1.10}), &secs), 1);
  ASSERT_EQ(secs.size(), 3u);
  EXPECT_LT(secs[1], secs[0]);
  // The same candidate with one call held up 50x (the OS took its thread away): still chosen,
  // as the call counts at most twice its step's median. Negative control: summed uncapped,
  // that one call would lose it the choice.
  auto held = drifting_steps({1.00, 0.97, 1.10});
  held[17][1] *= 50;
  EXPECT_EQ(cpu::gemm::interleaved_choice(held, nullptr), 1);
  double plain0 = 0, plain1 = 0;
  for (const auto& step : held) plain0 += step[0], plain1 += step[1];
  EXPECT_GT(plain1, plain0);
  // No candidates: -1. A step missing a candidate is refused, not guessed.
  EXPECT_EQ(cpu::gemm::interleaved_choice({}, nullptr), -1);
  EXPECT_DEATH(cpu::gemm::interleaved_choice({{1.0, 1.1}, {1.0}}, nullptr), "a step with 1 of 2 candidates");
}

// Restores the large-M path when a test ends.
struct LargePathGuard {
  std::string saved = cpu::gemm::large_m_path_id();
  ~LargePathGuard() {
    std::string why;
    cpu::gemm::set_large_m_path(saved, "restored", &why);
  }
};

TEST(GemmTune, LargeMPathTimedChosenAndCached) {
  LargePathGuard guard;
  if (cpu::gemm::large_m_paths(nullptr).empty()) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every M";
  const fs::path dir = fs::temp_directory_path() / ("dayzero-gemm-large-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto w1 = random_vector(384 * 256, 41), w2 = random_vector(256 * 640, 42);
  const std::vector<cpu::gemm::TuneWeight> weights = {{384, 256, w1.data(), false}, {256, 640, w2.data(), false}};
  const std::string rule = cpu::gemm::large_m_rule_id();
  const auto first = cpu::gemm::tune_large_m(weights, dir.string(), 0.05);
  std::printf("%s\n", first.describe().c_str());
  EXPECT_EQ(first.source.rfind("measured", 0), 0u) << first.source;
  EXPECT_EQ(first.rule, rule);
  ASSERT_FALSE(first.candidates.empty());
  EXPECT_EQ(first.candidates.front().id, rule);  // the rule's path is always timed, first
  bool listed = false;
  for (const auto& c : first.candidates) {
    EXPECT_GT(c.gflop_s, 0) << c.id;
    listed |= c.id == first.chosen;
  }
  EXPECT_TRUE(listed) << first.chosen;
  EXPECT_EQ(cpu::gemm::large_m_path_id(), first.chosen);

  const auto again = cpu::gemm::tune_large_m(weights, dir.string(), 0.05);
  EXPECT_EQ(again.source.rfind("cached in ", 0), 0u) << again.source;
  EXPECT_EQ(again.chosen, first.chosen);
  fs::remove_all(dir);
}

TEST(GemmTune, LargeMChoiceTakesEffectAndAnUnknownPathIsRefused) {
  LargePathGuard guard;
  const auto paths = cpu::gemm::large_m_paths(nullptr);
  if (paths.size() < 2) GTEST_SKIP() << paths.size() << " large-M path(s) load here: nothing to switch between";
  // Every large-M path at m = 40 (above the small-M kernel's 16) after the switch gives that
  // path's own bits: the product runs on the path switched to.
  const int64_t m = 40, n = 96, k = 300;
  const auto x = random_vector(m * k, 51), w = random_vector(n * k, 52);
  std::vector<std::vector<float>> own;
  for (const auto& p : paths) {
    std::vector<float> direct(m * n), via(m * n);
    p.path->matmul_nt(m, n, k, x.data(), w.data(), direct.data(), 0.0f);
    std::string why;
    ASSERT_TRUE(cpu::gemm::set_large_m_path(p.id, "test", &why)) << why;
    EXPECT_EQ(cpu::gemm::large_m_path_id(), p.id);
    EXPECT_NE(cpu::gemm_info().path.find(p.path->name()), std::string::npos) << cpu::gemm_info().path;
    cpu::matmul_nt(m, n, k, x.data(), w.data(), via.data());
    EXPECT_TRUE(identical(p.id + " via matmul_nt", via, direct, {m, n}));
    own.push_back(direct);
  }
  // Negative control: two paths' bits differ somewhere (else the check above proves nothing).
  bool any_differ = false;
  for (size_t i = 1; i < own.size(); ++i) any_differ |= own[i] != own[0];
  EXPECT_TRUE(any_differ) << "every large-M path gave the same bits at " << m << "x" << n << "x" << k;
  std::string why;
  EXPECT_FALSE(cpu::gemm::set_large_m_path("cublas", "test", &why));
  EXPECT_NE(why.find("'cublas'"), std::string::npos) << why;
}

}  // namespace
}  // namespace dayzero::kernels
