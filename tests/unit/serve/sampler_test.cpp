// Seeded sampling: temperature 0 is the greedy argmax, a seed gives one sequence of draws, and the
// draws follow the softmax at the temperature within top-p.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "serve/sampler.h"

namespace dayzero::serve {
namespace {

TEST(Sampler, TemperatureZeroIsTheArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  Sampler s(0, 1, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.pick(logits.data(), 4), 1);  // the lower id of a tie, as greedy decode
}

TEST(Sampler, SameSeedSameDrawsOtherSeedOtherDraws) {
  std::vector<float> logits(64, 0.0f);
  Sampler a(1, 1, 7), b(1, 1, 7), c(1, 1, 8);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.pick(logits.data(), 64));
    db.push_back(b.pick(logits.data(), 64));
    dc.push_back(c.pick(logits.data(), 64));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(Sampler, FollowsTheSoftmaxWithinTopP) {
  // p = (0.25, 0.75) at temperature 1; at temperature 0.5 (0.1, 0.9). 20000 draws: the standard
  // error of a frequency is under 0.0035, so 0.015 is more than 4 of them.
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0)), -30.0f};
  for (const auto& [t, expect] : {std::pair<double, double>{1.0, 0.75}, {0.5, 0.9}}) {
    Sampler s(t, 1, 123);
    int ones = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ones += s.pick(logits.data(), 3) == 1;
    EXPECT_NEAR(static_cast<double>(ones) / n, expect, 0.015) << "temperature " << t;
  }
  Sampler nucleus(1, 0.5, 5);  // the most likely token alone already holds 0.75 >= 0.5
  for (int i = 0; i < 100; ++i) EXPECT_EQ(nucleus.pick(logits.data(), 3), 1);
}

// The adjustments, each against the greedy pick it must change (and only that one).
TEST(Sampler, PenaltiesBiasAndMinTokensChangeTheGreedyPick) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f, 0.5f};  // greedy: 1, then 2
  SamplingParams p;
  p.frequency_penalty = 1.0;  // 3 - 1 = 2 < 2.5 after one draw of 1
  Sampler freq(p);
  EXPECT_EQ(freq.pick(logits.data(), 4), 1);
  EXPECT_EQ(freq.pick(logits.data(), 4), 2);
  p = {};
  p.presence_penalty = 0.4;  // 3 - 0.4 = 2.6 > 2.5: still 1
  Sampler pres(p);
  EXPECT_EQ(pres.pick(logits.data(), 4), 1);
  EXPECT_EQ(pres.pick(logits.data(), 4), 1);
  p = {};
  p.repetition_penalty = 1.5;  // token 1 in the prompt: 3 / 1.5 = 2 < 2.5
  EXPECT_EQ(Sampler(p, {1}).pick(logits.data(), 4), 2);
  EXPECT_EQ(Sampler(p, {0}).pick(logits.data(), 4), 1);
  p = {};
  p.logit_bias = {{3, 100.0}};
  EXPECT_EQ(Sampler(p).pick(logits.data(), 4), 3);
  p = {};
  p.min_tokens = 2;  // 1 is the EOS: held back for two tokens
  Sampler min(p, {}, {1});
  EXPECT_EQ(min.pick(logits.data(), 4), 2);
  EXPECT_EQ(min.pick(logits.data(), 4), 2);
  EXPECT_EQ(min.pick(logits.data(), 4), 1);
  // Neutral values leave the greedy pick (and its tie rule) as it is.
  EXPECT_EQ(Sampler(SamplingParams{}).pick(logits.data(), 4), 1);
}

TEST(Sampler, TopKAndMinPKeepOnlyTheLikelyTokens) {
  const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f};
  SamplingParams p;
  p.temperature = 1;
  p.top_k = 1;
  p.seed = 3;
  Sampler k1(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(k1.pick(logits.data(), 4), 3);
  p.top_k = 0;
  p.min_p = 0.85;  // exp(-0.1) = 0.905 of the top survives, exp(-0.2) = 0.819 does not
  Sampler mp(p);
  int seen[4] = {};
  for (int i = 0; i < 400; ++i) ++seen[mp.pick(logits.data(), 4)];
  EXPECT_EQ(seen[0] + seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[3], 0);
}

}  // namespace
}  // namespace dayzero::serve
