// The runtime side of the naive reference tests and their verdicts: runs a generated
// checkpoint through runtime::Forward (optionally with a deliberately wrong hyper-parameter),
// measures per-position relative L2 against the naive logits, prints the agreement, and
// checks a tolerance or, for a negative control, that the error exceeds it.
// Not a reference: the naive implementations live in the tests and naive_reference.h.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tools/make_model.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"
#include "naive_reference.h"

namespace dayzero::naive {

// The ids every naive reference test runs: a prefill of the first kPrefill, then one token at
// a time, so the KV-cache path is compared too.
inline const std::vector<int32_t> kIds = {5, 17, 255, 3, 42, 42, 7, 100, 299, 0, 11};
inline constexpr size_t kPrefill = 7;

// Logits [ids.size(), n_vocab] from the runtime on the checkpoint in `dir`; `perturb` edits
// the parsed hyper-parameters first (negative controls). Empty on failure (with a gtest failure).
inline std::vector<float> runtime_logits(const std::filesystem::path& dir,
                                         const std::function<void(model::HParams&)>& perturb = {}) {
  auto info = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
  EXPECT_TRUE(info.ok()) << info.status().message();
  if (!info.ok()) return {};
  EXPECT_TRUE(runtime::check_tensors(*info).ok());
  auto be = backend::make_backend({});
  EXPECT_TRUE(be.ok());
  if (!be.ok()) return {};
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  EXPECT_TRUE(runtime::load_weights(*info, **be, w, recs).ok());
  model::HParams hp = info->hp;
  if (perturb) perturb(hp);
  runtime::Forward fwd(**be, *info->adapter, hp, w);
  runtime::KvCache cache = fwd.new_cache(static_cast<int64_t>(kIds.size()));
  Tensor first = fwd.run(std::span(kIds).first(kPrefill), 0, cache, nullptr, true);
  std::vector<float> ours(first.f32(), first.f32() + first.numel());
  for (size_t t = kPrefill; t < kIds.size(); ++t) {
    Tensor step = fwd.run(std::span(kIds).subspan(t, 1), static_cast<int64_t>(t), cache, nullptr, false);
    ours.insert(ours.end(), step.f32(), step.f32() + step.numel());
  }
  return ours;
}

// Relative L2 of every position's logits.
struct Agreement {
  std::vector<double> per_position;
  double max = 0;
  size_t worst = 0;
};

inline Agreement measure(const std::vector<float>& ours, const Mat& expected, int64_t vocab) {
  Agreement a;
  EXPECT_EQ(ours.size(), expected.size());
  if (ours.size() != expected.size()) {
    a.max = 1e300;
    return a;
  }
  for (size_t t = 0; t * vocab < ours.size(); ++t) {
    const double e = rel_l2(ours.data() + t * vocab, expected.data() + t * vocab, static_cast<size_t>(vocab));
    a.per_position.push_back(e);
    if (e > a.max || t == 0) a.max = e, a.worst = t;
  }
  return a;
}

// A variant's own negative control: the runtime run with the variant's feature switched off
// (e.g. llama3 scaling read as default RoPE) must fail, so the variant is really exercised.
struct FeatureControl {
  const char* what = nullptr;  // nullptr: none
  std::function<void(model::HParams&)> perturb;
};

// The check: every position within `tol`. Prints the measured agreement either way.
inline void expect_within(const std::string& what, const Agreement& a, double tol, uint64_t seed) {
  std::printf("[agreement] %s: max rel L2 %.3g at position %zu (tolerance %.3g)\n", what.c_str(), a.max, a.worst, tol);
  for (size_t t = 0; t < a.per_position.size(); ++t)
    EXPECT_LT(a.per_position[t], tol) << what << " position " << t << " seed " << seed;
}

// A negative control: the same check on a deliberately wrong run must fail, i.e. some
// position's error must exceed `tol`.
inline void expect_control_fails(const std::string& what, const Agreement& a, double tol, uint64_t seed) {
  std::printf("[negative control] %s: max rel L2 %.3g at position %zu (tolerance %.3g, must exceed)\n", what.c_str(),
              a.max, a.worst, tol);
  EXPECT_GT(a.max, tol) << what << ": a deliberately wrong run passes the tolerance, so the check cannot see it"
                        << " (seed " << seed << ")";
}

}  // namespace dayzero::naive
