// The qwen3_5_moe adapter on Qwen3.5-397B-A17B's published config.json (and through it the
// qwen3_next layout): hybrid layer types, partial rotary, the split Gated DeltaNet projections,
// the vision tower and multi-token-prediction layer declared but never loaded, 397B parameters;
// bad layer_types refused. Numerics are hf_golden_test's and gated_deltanet_test's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "model/inspect.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

nlohmann::json published() {
  std::ifstream f(std::string(DAYZERO_SHARED_DIR) + "/fixtures/configs/Qwen3.5-397B-A17B/config.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

TEST(Qwen35Moe, PublishedConfigParsesToTheHybridTextModel) {
  const nlohmann::json c = published();
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "qwen3_5_moe");
  auto hp = (*a)->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_layer, 60);
  EXPECT_EQ(hp->linear_layers.size(), 45u);
  EXPECT_FALSE(hp->is_linear_layer(3));
  EXPECT_TRUE(hp->is_linear_layer(4));
  EXPECT_EQ(hp->rope_dim, 64);  // 256 x 0.25; mrope_section 11 + 11 + 10 = 32 = 64 / 2
  EXPECT_EQ(hp->linear.v_per_k(), 4);
  EXPECT_TRUE(hp->attn_output_gate);
  EXPECT_TRUE(hp->norm_weight_offset);
  EXPECT_EQ(hp->n_nextn_layer, 1);
  const std::vector<TensorSpec> specs = (*a)->tensor_specs(*hp);
  int vision = 0, mtp = 0;
  std::set<std::string> names;
  for (const auto& s : specs) {
    names.insert(s.name);
    if (s.name.rfind("model.visual.", 0) == 0) {
      ++vision;
      EXPECT_TRUE(s.skip_load) << s.name;
    }
    if (s.name.rfind("mtp.", 0) == 0) {
      ++mtp;
      EXPECT_TRUE(s.skip_load) << s.name;
    }
  }
  EXPECT_EQ(vision, 3 + 27 * 12 + 6);
  EXPECT_EQ(mtp, 4 + 2 + 6 + 1 + 512 * 3 + 4);  // fc + 3 norms, layer norms, attention, router, experts, shared
  EXPECT_TRUE(names.count("model.language_model.layers.0.linear_attn.in_proj_qkv.weight"));
  EXPECT_TRUE(names.count("model.language_model.layers.3.self_attn.q_norm.weight"));
  EXPECT_TRUE(names.count("mtp.layers.0.mlp.experts.511.down_proj.weight"));
  EXPECT_FALSE(names.count("model.language_model.layers.0.linear_attn.in_proj_qkvz.weight"));
  // The model card's 397B total (17B activated: 17.35B for a text token, 17.81B with the tower).
  const ParamReport r = inspect_params(*hp, specs, c);
  EXPECT_LE(std::fabs(static_cast<double>(r.total) - 397e9), 0.01 * 397e9) << r.total;
  EXPECT_LE(std::fabs(static_cast<double>(r.activated) - 17e9), 0.05 * 17e9) << r.activated;
  EXPECT_GT(r.mtp_total, 0);
}

TEST(Qwen35Moe, LayerTypesOfAnotherLengthAreRefused) {
  nlohmann::json c = published();
  c["text_config"]["layer_types"].erase(0);
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok());
  auto hp = (*a)->parse_hparams(c);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("layer_types lists 59 layers but num_hidden_layers is 60"), std::string::npos)
      << hp.status().message();
  c = published();
  c["text_config"]["layer_types"][2] = "sliding_attention";
  EXPECT_NE((*a)->parse_hparams(c).status().message().find("layer_types[2] is 'sliding_attention'"), std::string::npos);
}

}  // namespace
}  // namespace dayzero::model
