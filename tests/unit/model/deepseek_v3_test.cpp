// deepseek_v3 / Kimi-K2: the interleaved RoPE helper, and the adapter on Kimi-K2's real config
// (MLA sizes, YaRN against values printed by transformers 5, FP8 scale companions,
// multi-token-prediction layers skipped). The group-limited routing is tested in
// tests/unit/kernels/router_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "model/blocks/mla.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

TEST(MlaRope, InterleavedPairsAreRotatedAndDeinterleaved) {
  // One token, one head, rope over 4 dims after 1 leading (nope) dim; pairs (x1, x2), (x3, x4).
  std::vector<float> x = {7, 1, 2, 3, 4};
  const int32_t pos = 3;
  const float inv[2] = {0.5f, 0.25f};
  blocks::rope_host(x.data(), 1, 1, 5, 1, 4, &pos, inv, 2.0f, true);
  const float c0 = 2 * std::cos(1.5f), s0 = 2 * std::sin(1.5f), c1 = 2 * std::cos(0.75f), s1 = 2 * std::sin(0.75f);
  EXPECT_EQ(x[0], 7);
  EXPECT_NEAR(x[1], 1 * c0 - 2 * s0, 1e-5);
  EXPECT_NEAR(x[2], 3 * c1 - 4 * s1, 1e-5);
  EXPECT_NEAR(x[3], 2 * c0 + 1 * s0, 1e-5);
  EXPECT_NEAR(x[4], 4 * c1 + 3 * s1, 1e-5);
}

nlohmann::json kimi_config() {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/Kimi-K2-Instruct/config.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

TEST(DeepseekV3, KimiK2ConfigParses) {
  const nlohmann::json c = kimi_config();
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "deepseek_v3");
  auto hp = (*a)->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->deepseek().mla.q_lora_rank, 1536);
  EXPECT_EQ(hp->deepseek().mla.kv_lora_rank, 512);
  EXPECT_EQ(hp->deepseek().mla.qk_head_dim(), 192);
  EXPECT_EQ(hp->head_dim, 192);
  EXPECT_EQ(hp->n_expert, 384);
  EXPECT_EQ(hp->deepseek().routing.n_group, 1);
  EXPECT_NEAR(hp->deepseek().routing.routed_scaling_factor, 2.827, 1e-12);
  EXPECT_EQ(hp->dense_layers, std::vector<int>{0});
  EXPECT_EQ(hp->quant_block_rows, 128);
  // transformers 5: yarn_apply_mscale(rope_parameters, 192 ** -0.5) and the yarn table.
  EXPECT_NEAR(hp->deepseek().mla.softmax_scale, 0.13086079996295005, 1e-12);
  const std::vector<float> inv = rope_inv_freq(*hp);
  ASSERT_EQ(inv.size(), 32u);
  const std::pair<int, double> want[] = {{0, 1.0}, {5, 0.184410617}, {10, 0.0340072773}, {20, 3.61404673e-05},
                                         {31, 8.76441277e-07}};
  for (const auto& [i, v] : want) EXPECT_NEAR(inv[i], v, v * 1e-6) << i;
  EXPECT_DOUBLE_EQ(rope_attention_factor(hp->rope_scaling), 1.0);
}

TEST(DeepseekV3, Fp8ScalesAndMtpLayersAreClaimedNotLoaded) {
  nlohmann::json c = kimi_config();
  c["num_nextn_predict_layers"] = 1;
  const Adapter& a = **find_adapter(c);
  const HParams hp = *a.parse_hparams(c);
  const std::vector<TensorSpec> specs = a.tensor_specs(hp);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& s : specs) by_name[s.name] = &s;
  const auto get = [&](const std::string& n) {
    auto it = by_name.find(n);
    EXPECT_NE(it, by_name.end()) << n;
    return it == by_name.end() ? nullptr : it->second;
  };
  const TensorSpec* kv_a = get("model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_TRUE(kv_a);
  EXPECT_EQ(kv_a->shape, (Shape{576, 7168}));
  EXPECT_EQ(kv_a->stored.scale, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight_scale_inv");
  const TensorSpec* kv_a_scale = get(kv_a->stored.scale);
  ASSERT_TRUE(kv_a_scale);
  EXPECT_EQ(kv_a_scale->shape, (Shape{5, 56}));  // 576 rows: 4 full blocks and an edge of 64
  EXPECT_TRUE(kv_a_scale->skip_load);
  const TensorSpec* expert = get("model.layers.60.mlp.experts.383.down_proj.weight");
  ASSERT_TRUE(expert);
  EXPECT_FALSE(expert->stored.scale.empty());
  EXPECT_FALSE(expert->skip_load);
  for (const char* n : {"model.layers.3.mlp.gate.weight", "model.layers.3.mlp.gate.e_score_correction_bias",
                        "model.embed_tokens.weight", "lm_head.weight"}) {
    const TensorSpec* s = get(n);
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->stored.scale.empty()) << n;
  }
  EXPECT_FALSE(by_name.count("model.layers.3.mlp.gate.weight_scale_inv"));
  // MTP layer 61: declared (claimed by the check), never loaded.
  int mtp = 0;
  for (const auto& s : specs)
    if (s.layer == 61) {
      ++mtp;
      EXPECT_TRUE(s.skip_load) << s.name;
    } else if (s.name.find("_scale_inv") == std::string::npos) {
      EXPECT_FALSE(s.skip_load) << s.name;
    }
  EXPECT_GT(mtp, 384 * 3);
  for (const char* n : {"model.layers.61.eh_proj.weight", "model.layers.61.shared_head.head.weight",
                        "model.layers.61.enorm.weight", "model.layers.61.mlp.experts.0.up_proj.weight_scale_inv"})
    EXPECT_TRUE(get(n)) << n;
}

TEST(DeepseekV3, RejectsBadGrouping) {
  nlohmann::json c = kimi_config();
  c["n_group"] = 5;  // 384 experts do not split into 5 groups
  auto hp = (*find_adapter(c))->parse_hparams(c);
  ASSERT_FALSE(hp.ok());
  EXPECT_EQ(hp.status().exit_code(), 2);
  EXPECT_NE(hp.status().message().find("n_group"), std::string::npos) << hp.status().message();
}

}  // namespace
}  // namespace dayzero::model

namespace dayzero::model {
namespace {

nlohmann::json v32_config() {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/DeepSeek-V3.2/config.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

// DeepSeek-V3.2's published config: the indexer sizes, its tensors in the published layout
// (wq_b and wk block-quantized like the other Linears, weights_proj and the LayerNorm not).
TEST(DeepseekV32, PublishedConfigParsesWithItsIndexer) {
  const nlohmann::json c = v32_config();
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "deepseek_v32");
  auto hp = (*a)->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->deepseek().dsa.index_topk, 2048);
  EXPECT_EQ(hp->deepseek().dsa.index_n_heads, 64);
  EXPECT_EQ(hp->deepseek().dsa.index_head_dim, 128);
  EXPECT_TRUE(hp->deepseek().mla.rope_interleave);
  std::map<std::string, TensorSpec> by_name;
  for (const auto& s : (*a)->tensor_specs(*hp)) by_name[s.name] = s;
  const std::string p = "model.layers.5.self_attn.indexer.";
  ASSERT_TRUE(by_name.count(p + "wq_b.weight"));
  EXPECT_EQ(by_name[p + "wq_b.weight"].shape, (Shape{64 * 128, 1536}));
  EXPECT_EQ(by_name[p + "wq_b.weight"].stored.scale, p + "wq_b.weight_scale_inv");
  EXPECT_EQ(by_name[p + "wk.weight"].shape, (Shape{128, 7168}));
  EXPECT_EQ(by_name[p + "wk.weight"].stored.scale, p + "wk.weight_scale_inv");
  EXPECT_EQ(by_name[p + "weights_proj.weight"].shape, (Shape{64, 7168}));
  EXPECT_EQ(by_name[p + "weights_proj.weight"].stored.scale, "");
  EXPECT_EQ(by_name[p + "k_norm.bias"].shape, (Shape{128}));
  EXPECT_EQ(by_name[p + "k_norm.weight"].rule, ShardRule::kReplicated);
  // The multi-token-prediction layer's indexer is claimed, never loaded.
  ASSERT_TRUE(by_name.count("model.layers.61.self_attn.indexer.wk.weight"));
  EXPECT_TRUE(by_name["model.layers.61.self_attn.indexer.wk.weight"].skip_load);
}

TEST(DeepseekV32, RejectsAnIndexerThatKeepsNoKeys) {
  nlohmann::json c = v32_config();
  for (const int bad : {0, -1}) {
    c["index_topk"] = bad;
    auto hp = (*find_adapter(c))->parse_hparams(c);
    ASSERT_FALSE(hp.ok());
    EXPECT_EQ(hp.status().exit_code(), 2);
    EXPECT_NE(hp.status().message().find("index_topk"), std::string::npos) << hp.status().message();
  }
  c = v32_config();
  c.erase("index_head_dim");
  EXPECT_FALSE((*find_adapter(c))->parse_hparams(c).ok());
}

}  // namespace
}  // namespace dayzero::model
