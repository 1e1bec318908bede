// blocks/v4_routing (DeepSeek-V4's expert choice) against transformers 5.25 on the tiny
// deepseek_v4 model (tests/data/golden/deepseek_v4.safetensors: each layer's router logits, the
// experts it chose and their weights, the selection bias or the tid2eid table): layer 0 is
// hash-routed, layers 1-3 learned with sqrtsoftplus scores. Negative controls: softmax scores,
// a tid2eid table off by one, the bias left out.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/blocks/v4_routing.h"
#include "tests/unit/model/v4_golden.h"

namespace dayzero::model::blocks {
namespace {

using v4_test::rel_l2;
const std::vector<float>& g(const std::string& name) { return v4_test::golden(name); }

std::vector<int32_t> ints(const std::vector<float>& v) { return {v.begin(), v.end()}; }

constexpr int64_t kTokens = 40, kExperts = 8;

Routing route(int layer, const std::string& scoring, bool bias = true, int hash_shift = 0) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  V4RouterOptions o;
  o.scoring = scoring;
  o.n_used = 2;
  o.scaling = 1.5f;  // routed_scaling_factor of the tiny model
  std::vector<float> b;
  std::vector<int32_t> table, tokens;
  if (layer == 0) {
    table = ints(g(p + "router_tid2eid"));
    for (auto& e : table) e = static_cast<int32_t>((e + hash_shift) % kExperts);
    tokens = ints(g("prompt_ids"));
  } else {
    b = bias ? g(p + "router_bias") : std::vector<float>(kExperts, 0.0f);
  }
  auto r = route_v4(g(p + "router_logits"), kTokens, kExperts, b, table, tokens, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : Routing{};
}

// Measured: the same experts in the same order on all 4 layers, weights within relative L2
// 5.1e-8 at most (f32 both sides); tolerance 1e-7.
TEST(V4Routing, MatchesTransformers) {
  for (int layer = 0; layer < 4; ++layer) {
    SCOPED_TRACE(layer);
    const std::string p = "layers." + std::to_string(layer) + ".";
    const Routing r = route(layer, "sqrtsoftplus");
    EXPECT_EQ(r.ids, ints(g(p + "topk_ids")));
    const double e = rel_l2(r.weights, g(p + "topk_weights"));
    EXPECT_LT(e, 1e-7);
    std::printf("layer %d: weights relative L2 %.2e\n", layer, e);
  }
}

TEST(V4Routing, NegativeControlsFail) {
  for (int layer = 0; layer < 4; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const Routing soft = route(layer, "softmax");
    EXPECT_GT(rel_l2(soft.weights, g(p + "topk_weights")), 1e-7) << layer;
    if (layer == 0) {
      EXPECT_NE(route(0, "sqrtsoftplus", true, 1).ids, ints(g(p + "topk_ids")));
    } else {
      EXPECT_NE(route(layer, "sqrtsoftplus", false).ids, ints(g(p + "topk_ids"))) << layer;
    }
  }
}

TEST(V4Routing, BadInputIsRefused) {
  V4RouterOptions o;
  o.n_used = 2;
  const std::vector<float> logits(2 * kExperts, 0.0f);
  const std::vector<int32_t> table = {0, 1, 2, 9};  // 2 tokens' rows; row 1 names expert 9 of 8
  auto r = route_v4(logits, 2, kExperts, {}, table, std::vector<int32_t>{0, 1}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tid2eid[1] names expert 9"), std::string::npos) << r.status().message();
  auto out_of_table = route_v4(logits, 2, kExperts, {}, table, std::vector<int32_t>{0, 2}, o);
  ASSERT_FALSE(out_of_table.ok());
  EXPECT_NE(out_of_table.status().message().find("token id 2"), std::string::npos) << out_of_table.status().message();
}

}  // namespace
}  // namespace dayzero::model::blocks
