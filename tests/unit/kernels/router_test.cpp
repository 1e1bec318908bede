// The MoE router kernels (kernels/cpu/router.h) against plain-loop twins that select by
// repeated arg-max (the CUDA kernel's algorithm) instead of sorting: ids and weights must be
// bit-identical (the same f32 operations in the same order), on seeded logits with many exact
// ties, for softmax and for group-limited sigmoid routing; plus hand-made cases (DeepSeek-V3's
// group rule, the bias steering selection only, ties to the lower index) and negative
// controls (the opposite tie rule, groups ignored) that the comparison sees.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/router.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::random_vector;

// The tie rule of router.h, or its opposite for the negative control.
bool better(float a, int ia, float b, int ib, bool lower_index_wins = true) {
  return a > b || (a == b && (lower_index_wins ? ia < ib : ia > ib));
}

// Index of the best not-taken value of v[n].
int pick(const std::vector<float>& v, const std::vector<char>& taken, bool lower_index_wins = true) {
  int best = -1;
  for (int e = 0; e < static_cast<int>(v.size()); ++e)
    if (!taken[e] && (best < 0 || better(v[e], e, v[best], best, lower_index_wins))) best = e;
  return best;
}

// The k best of v[n] in selection order, by k repeated picks.
std::vector<int> pick_k(const std::vector<float>& v, int64_t k, bool lower_index_wins = true) {
  std::vector<char> taken(v.size(), 0);
  std::vector<int> sel;
  for (int64_t j = 0; j < k; ++j) {
    sel.push_back(pick(v, taken, lower_index_wins));
    taken[sel.back()] = 1;
  }
  return sel;
}

struct Route {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Route twin_softmax(const std::vector<float>& logits, int64_t n, int64_t ne, int64_t k, bool renormalize,
                   bool lower_index_wins = true) {
  Route r;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> p(logits.begin() + t * ne, logits.begin() + (t + 1) * ne);
    float mx = p[0];
    for (float v : p) mx = v > mx ? v : mx;
    float z = 0;
    for (auto& v : p) z += (v = std::exp(v - mx));
    for (auto& v : p) v /= z;
    const std::vector<int> sel = pick_k(p, k, lower_index_wins);
    float sum = 0;
    for (int e : sel) sum += p[e];
    for (int e : sel) {
      r.ids.push_back(e);
      r.weights.push_back(renormalize ? p[e] / sum : p[e]);
    }
  }
  return r;
}

Route twin_sigmoid(const std::vector<float>& logits, const float* bias, int64_t n, int64_t ne, int64_t k,
                   const cpu::GroupRoute& o, bool lower_index_wins = true, bool use_groups = true) {
  Route r;
  const int64_t per = ne / o.n_group;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> s(ne), c(ne);
    for (int64_t e = 0; e < ne; ++e) {
      s[e] = 1.0f / (1.0f + std::exp(-logits[t * ne + e]));
      c[e] = s[e] + (bias ? bias[e] : 0.0f);
    }
    std::vector<float> gs(o.n_group);
    for (int64_t g = 0; g < o.n_group; ++g) {
      // The two largest by value (which of equal values is "first" does not change the sum).
      float best = -INFINITY, second = -INFINITY;
      for (int64_t i = 0; i < per; ++i) {
        const float v = c[g * per + i];
        if (v > best) second = best, best = v;
        else if (v > second) second = v;
      }
      gs[g] = per >= 2 ? best + second : best;
    }
    std::vector<char> on(o.n_group, use_groups ? 0 : 1);
    if (use_groups)
      for (int g : pick_k(gs, o.topk_group, lower_index_wins)) on[g] = 1;
    std::vector<float> masked(ne);
    for (int64_t e = 0; e < ne; ++e) masked[e] = on[e / per] ? c[e] : -INFINITY;
    const std::vector<int> sel = pick_k(masked, k, lower_index_wins);
    float sum = 0;
    for (int e : sel) sum += s[e];
    for (int e : sel) {
      r.ids.push_back(e);
      r.weights.push_back((o.renormalize ? s[e] / (sum + 1e-20f) : s[e]) * o.scaling);
    }
  }
  return r;
}

// Seeded logits rounded to steps of `step` (0: not rounded): a step of 1/8 over [-2, 2) makes
// exact ties in every row.
std::vector<float> logits_with_ties(size_t n, uint32_t seed, float step) {
  auto v = random_vector(n, seed, -2.0f, 2.0f);
  if (step > 0)
    for (auto& x : v) x = std::round(x / step) * step;
  return v;
}

Route run_softmax(const std::vector<float>& l, int64_t n, int64_t ne, int64_t k, bool renorm) {
  Route r{std::vector<int32_t>(n * k), std::vector<float>(n * k)};
  cpu::route_softmax_topk(n, ne, k, renorm, l.data(), r.ids.data(), r.weights.data());
  return r;
}
Route run_sigmoid(const std::vector<float>& l, const float* bias, int64_t n, int64_t ne, int64_t k,
                  const cpu::GroupRoute& o) {
  Route r{std::vector<int32_t>(n * k), std::vector<float>(n * k)};
  cpu::route_sigmoid_group_topk(n, ne, k, o, l.data(), bias, r.ids.data(), r.weights.data());
  return r;
}

// Bit-identical: the same f32 operations in the same order on both sides.
void expect_same(const Route& want, const Route& got, const std::string& what) {
  ASSERT_EQ(want.ids.size(), got.ids.size()) << what;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    ASSERT_EQ(want.ids[i], got.ids[i]) << what << ": id [" << i << "]";
    ASSERT_EQ(want.weights[i], got.weights[i]) << what << ": weight [" << i << "]";
  }
}

TEST(RouterSoftmax, EqualsThePlainLoopTwinWithTies) {
  const int64_t n = 9, k = 4;
  for (int64_t ne : {8, 60, 128})
    for (float step : {0.0f, 0.125f})
      for (bool renorm : {false, true}) {
        const uint32_t seed = 31 + static_cast<uint32_t>(ne) + (step > 0 ? 1000 : 0);
        const auto l = logits_with_ties(n * ne, seed, step);
        const std::string what = "n_expert " + std::to_string(ne) + " step " + std::to_string(step) +
                                 " renormalize " + std::to_string(renorm) + " seed " + std::to_string(seed);
        expect_same(twin_softmax(l, n, ne, k, renorm), run_softmax(l, n, ne, k, renorm), what);
      }
}

// Negative control: where ties are made, the opposite tie rule changes the ids.
TEST(RouterSoftmax, TheOppositeTieRuleIsSeen) {
  const int64_t n = 9, ne = 60, k = 4;
  const auto l = logits_with_ties(n * ne, 2000, 0.125f);
  EXPECT_NE(twin_softmax(l, n, ne, k, true, false).ids, run_softmax(l, n, ne, k, true).ids);
}

TEST(RouterSigmoidGrouped, EqualsThePlainLoopTwinWithTies) {
  const int64_t n = 9;
  struct Case {
    int64_t ne, k, n_group, topk_group;
  };
  // DeepSeek-V3's shape in small (8 groups, 4 kept), Kimi-K2's single group, groups of one.
  for (const Case c : {Case{64, 8, 8, 4}, Case{48, 6, 1, 1}, Case{16, 2, 16, 3}, Case{256, 8, 8, 4}})
    for (float step : {0.0f, 0.125f})
      for (bool with_bias : {false, true}) {
        const uint32_t seed = 77 + static_cast<uint32_t>(c.ne + c.n_group) + (step > 0 ? 1000 : 0);
        const auto l = logits_with_ties(n * c.ne, seed, step);
        // A bias on a step too, so that biased scores tie as well.
        const auto bias = logits_with_ties(c.ne, seed + 1, step > 0 ? 0.25f : 0.0f);
        cpu::GroupRoute o{c.n_group, c.topk_group, true, 2.5f};
        const float* b = with_bias ? bias.data() : nullptr;
        const std::string what = "n_expert " + std::to_string(c.ne) + " groups " + std::to_string(c.n_group) + "/" +
                                 std::to_string(c.topk_group) + " step " + std::to_string(step) + " bias " +
                                 std::to_string(with_bias) + " seed " + std::to_string(seed);
        expect_same(twin_sigmoid(l, b, n, c.ne, c.k, o), run_sigmoid(l, b, n, c.ne, c.k, o), what);
        o.renormalize = false;
        o.scaling = 1.0f;
        expect_same(twin_sigmoid(l, b, n, c.ne, c.k, o), run_sigmoid(l, b, n, c.ne, c.k, o), what + " plain");
      }
}

// Negative controls: the opposite tie rule, and ignoring the groups, each change the ids.
TEST(RouterSigmoidGrouped, TheOppositeTieRuleAndIgnoredGroupsAreSeen) {
  const int64_t n = 9, ne = 64, k = 8;
  const cpu::GroupRoute o{8, 4, true, 2.5f};
  const auto l = logits_with_ties(n * ne, 3000, 0.125f);
  const Route got = run_sigmoid(l, nullptr, n, ne, k, o);
  EXPECT_NE(twin_sigmoid(l, nullptr, n, ne, k, o, false).ids, got.ids);
  EXPECT_NE(twin_sigmoid(l, nullptr, n, ne, k, o, true, false).ids, got.ids);
}

// Logits whose sigmoid is exactly p.
std::vector<float> logits_of(const std::vector<float>& p) {
  std::vector<float> l;
  for (float v : p) l.push_back(std::log(v / (1 - v)));
  return l;
}

TEST(RouterSigmoidGrouped, PicksTopExpertsOfTheBestGroups) {
  // 8 experts in 4 groups of 2; group scores (top-2 sums): 1.0, 1.3, 0.4, 1.2 -> groups 1 and 3.
  // Expert 0 (0.9) is the single best but sits in group 0, which is dropped.
  const std::vector<float> p = {0.9f, 0.1f, 0.6f, 0.7f, 0.2f, 0.2f, 0.65f, 0.55f};
  const Route r = run_sigmoid(logits_of(p), nullptr, 1, 8, 2, {4, 2, true, 2.5f});
  ASSERT_EQ(r.ids, (std::vector<int32_t>{3, 6}));
  EXPECT_NEAR(r.weights[0], 2.5f * 0.7f / 1.35f, 1e-5);
  EXPECT_NEAR(r.weights[1], 2.5f * 0.65f / 1.35f, 1e-5);
}

TEST(RouterSigmoidGrouped, BiasChangesSelectionNotWeights) {
  const std::vector<float> p = {0.9f, 0.1f, 0.6f, 0.7f, 0.2f, 0.2f, 0.65f, 0.55f};
  // +0.6 on experts 4 and 5 lifts group 2 (0.4 -> 1.6) above groups 1 and 3 and both experts
  // (0.8) above expert 3 (0.7); their weights still come from the unbiased 0.2.
  const std::vector<float> bias = {0, 0, 0, 0, 0.6f, 0.6f, 0, 0};
  const Route r = run_sigmoid(logits_of(p), bias.data(), 1, 8, 2, {4, 2, false, 1.0f});
  ASSERT_EQ(r.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_NEAR(r.weights[0], 0.2f, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.2f, 1e-6);
}

TEST(RouterSigmoidGrouped, TiesGoToTheLowerIndex) {
  // Every score equal: groups 0 and 1 win, then experts 0 and 1.
  const std::vector<float> l(8, 0.0f);
  const Route r = run_sigmoid(l, nullptr, 1, 8, 3, {4, 2, true, 1.0f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float w : r.weights) EXPECT_NEAR(w, 1.0f / 3, 1e-6);
  // One group (Kimi-K2's n_group 1): plain top-k of the biased scores.
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 0.1f, 0};
  const Route r1 = run_sigmoid(l, bias.data(), 1, 8, 2, {1, 1, true, 1.0f});
  EXPECT_EQ(r1.ids, (std::vector<int32_t>{6, 0}));
}

TEST(RouterSoftmax, TiesGoToTheLowerIndex) {
  const std::vector<float> l = {0.5f, 1.0f, 1.0f, 0.5f, 1.0f};
  const Route r = run_softmax(l, 1, 5, 4, false);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 0}));
}

}  // namespace
}  // namespace dayzero::kernels
