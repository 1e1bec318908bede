// Forward::run_batch against Forward::run of each sequence alone, for every family: a decode
// step over several sequences (one row each, ragged caches) and a mixed batch (a several-token
// segment next to one-token segments) must give each sequence the logits and cache rows it
// gets alone. A deliberately swapped cache must not pass. Single-sequence correctness is
// reference_forward_test.cpp's; this is about segments only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "tools/make_model.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"

namespace dayzero {
namespace {
namespace fs = std::filesystem;

// Batched rows may go through GEMMs of another path (M > 16 takes the large-M library; the rule
// of the time, sgemv at M = 1 and sgemm above, measured at most 5.2e-7 here, deepseek_v3), so
// sums may round differently. A row over another sequence's cache is
// O(1) off (the control below).
constexpr double kTol = 1e-6;

double rel_l2(const float* want, const float* got, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

struct Loaded {
  fs::path dir;
  runtime::ModelInfo info;
  std::unique_ptr<backend::Backend> be;
  model::Weights w;
};

void load(const std::string& family, Loaded& m) {
  m.dir = fs::temp_directory_path() / ("dayzero-batch-" + family + "-" + std::to_string(getpid()));
  tools::MakeModelOptions o;
  o.family = family;
  o.out_dir = m.dir.string();
  o.dtype = DType::kF32;
  o.seed = 7;
  o.shape = {.n_vocab = 300, .n_embd = 48, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ff = 96};
  if (family == "mixtral" || family == "qwen3_moe" || family == "deepseek_v3") {
    o.shape.n_expert = 8;
    o.shape.n_expert_used = 2;
    o.shape.n_ff_expert = 32;
  }
  ASSERT_TRUE(tools::make_model(o).ok());
  auto info = model::open_model_folder(m.dir.string(), model::WeightsNeeded::kRequired);
  ASSERT_TRUE(info.ok()) << info.status().message();
  m.info = std::move(info).value();
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  m.be = std::move(be).value();
  std::vector<checkpoint::WeightRecord> recs;
  ASSERT_TRUE(runtime::load_weights(m.info, *m.be, m.w, recs).ok());
}

class BatchForward : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchForward, EachSequenceGetsWhatItGetsAlone) {
  const std::string family = GetParam();
  Loaded m;
  ASSERT_NO_FATAL_FAILURE(load(family, m));
  const model::HParams& hp = m.info.hp;
  const int64_t V = hp.n_vocab;
  runtime::Forward fwd(*m.be, *m.info.adapter, hp, m.w);

  // Three prompts of different lengths, each prefilled alone twice: once for the one-at-a-time
  // path (alone) and once for the batched path (batched).
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 255, 3, 42}, {9}, {100, 299, 0}};
  const std::vector<int32_t> next = {11, 12, 13};
  constexpr int64_t kCtx = 12;
  std::vector<runtime::KvCache> alone, batched;
  for (const auto& p : prompts) {
    alone.push_back(fwd.new_cache(kCtx));
    batched.push_back(fwd.new_cache(kCtx));
    fwd.run(p, 0, alone.back(), nullptr, false);
    fwd.run(p, 0, batched.back(), nullptr, false);
  }
  EXPECT_EQ(fwd.kv_cache_peak_bytes(), 6 * alone[0].bytes()) << "six caches of one size coexist";

  // 1. One decode step over the three sequences in one call.
  std::vector<runtime::SeqInput> batch;
  for (size_t i = 0; i < prompts.size(); ++i)
    batch.push_back({std::span(&next[i], 1), static_cast<int64_t>(prompts[i].size()), &batched[i]});
  const Tensor got = fwd.run_batch(batch, nullptr, false);  // [3, V]
  ASSERT_EQ(got.dim(0), 3);
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Tensor want = fwd.run(std::span(&next[i], 1), static_cast<int64_t>(prompts[i].size()), alone[i], nullptr, false);
    const double e = rel_l2(want.f32(), got.f32() + i * V, V);
    worst = std::max(worst, e);
    EXPECT_LE(e, kTol) << family << " sequence " << i << " decode logits";
  }
  // Each cache holds its own rows, bit-for-bit where the same call wrote them (prefill), close
  // where the batch did, and nothing past them.
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int l = 0; l < static_cast<int>(hp.n_layer); ++l) {
      const Tensor& a = alone[i].k(l);
      const Tensor& b = batched[i].k(l);
      const int64_t row = a.numel() / a.dim(0), used = static_cast<int64_t>(prompts[i].size()) + 1;
      EXPECT_EQ(rel_l2(a.f32(), b.f32(), row * (used - 1)), 0.0) << family << " seq " << i << " layer " << l;
      EXPECT_LE(rel_l2(a.f32() + (used - 1) * row, b.f32() + (used - 1) * row, row), kTol) << family << " seq " << i;
      double past = 0;
      for (int64_t x = used * row; x < b.numel(); ++x) past += std::fabs(b.f32()[x]);
      EXPECT_EQ(past, 0.0) << family << " seq " << i << ": rows past the sequence were written";
    }

  // 2. A mixed batch: three tokens of sequence 0 next to one token of sequence 2, both the
  // last-row logits and every row's logits.
  const std::vector<int32_t> more0 = {20, 21, 22};
  const int32_t more2 = 30;
  const int64_t p0 = static_cast<int64_t>(prompts[0].size()) + 1, p2 = static_cast<int64_t>(prompts[2].size()) + 1;
  const runtime::SeqInput mixed[] = {{more0, p0, &batched[0]}, {std::span(&more2, 1), p2, &batched[2]}};
  const Tensor all = fwd.run_batch(mixed, nullptr, true);  // [4, V]
  ASSERT_EQ(all.dim(0), 4);
  const Tensor w0 = fwd.run(more0, p0, alone[0], nullptr, true);               // [3, V]
  const Tensor w2 = fwd.run(std::span(&more2, 1), p2, alone[2], nullptr, true);  // [1, V]
  for (int r = 0; r < 3; ++r) {
    const double e = rel_l2(w0.f32() + r * V, all.f32() + r * V, V);
    worst = std::max(worst, e);
    EXPECT_LE(e, kTol) << family << " mixed batch, sequence 0 row " << r;
  }
  const double e2 = rel_l2(w2.f32(), all.f32() + 3 * V, V);
  worst = std::max(worst, e2);
  EXPECT_LE(e2, kTol) << family << " mixed batch, sequence 2";

  // 3. Last rows only, on fresh copies of the same state: sequence 0's third row, sequence 2's row.
  std::vector<runtime::KvCache> again;
  for (size_t i : {size_t{0}, size_t{2}}) {
    again.push_back(fwd.new_cache(kCtx));
    fwd.run(prompts[i], 0, again.back(), nullptr, false);
    fwd.run(std::span(&next[i], 1), static_cast<int64_t>(prompts[i].size()), again.back(), nullptr, false);
  }
  const runtime::SeqInput last_only[] = {{more0, p0, &again[0]}, {std::span(&more2, 1), p2, &again[1]}};
  const Tensor last = fwd.run_batch(last_only, nullptr, false);  // [2, V]
  ASSERT_EQ(last.dim(0), 2);
  EXPECT_LE(rel_l2(w0.f32() + 2 * V, last.f32(), V), kTol) << family << " last row of sequence 0";
  EXPECT_LE(rel_l2(w2.f32(), last.f32() + V, V), kTol) << family << " last row of sequence 2";

  // Control: sequence 1's token attending over sequence 0's cache (a wrong segment) must fail.
  runtime::KvCache wrong = fwd.new_cache(kCtx);
  fwd.run(prompts[0], 0, wrong, nullptr, false);
  const Tensor swapped = fwd.run(std::span(&next[1], 1), static_cast<int64_t>(prompts[1].size()), wrong, nullptr, false);
  const double control = rel_l2(got.f32() + 1 * V, swapped.f32(), V);
  EXPECT_GT(control, kTol) << family << ": a token over another sequence's cache passed the check";
  std::printf("[ worst    ] %-12s batched vs alone: relative L2 %.3g (control %.3g)\n", family.c_str(), worst, control);
  fs::remove_all(m.dir);
}

INSTANTIATE_TEST_SUITE_P(Families, BatchForward,
                         ::testing::Values("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3"));

}  // namespace
}  // namespace dayzero
