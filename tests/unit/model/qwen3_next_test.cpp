// The qwen3_5_moe adapter on Qwen3.5-397B-A17B's published config.json (and through it the
// qwen3_next layout): hybrid layer types, partial rotary, the split Gated DeltaNet projections,
// the vision tower and multi-token-prediction layer declared but never loaded, 397B parameters;
// bad layer_types refused. Numerics are hf_golden_test's and gated_deltanet_test's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "model/inspect.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

nlohmann::json published() {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/Qwen3.5-397B-A17B/config.json");
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
  EXPECT_EQ(hp->hybrid().linear_layers.size(), 45u);
  EXPECT_FALSE(hp->hybrid().is_linear_layer(3));
  EXPECT_TRUE(hp->hybrid().is_linear_layer(4));
  EXPECT_EQ(hp->rope_dim, 64);  // 256 x 0.25; mrope_section 11 + 11 + 10 = 32 = 64 / 2
  EXPECT_EQ(hp->hybrid().linear.v_per_k(), 4);
  EXPECT_TRUE(hp->hybrid().attn_output_gate);
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
  const ParamReport r = inspect_params(*hp, specs, c);
  EXPECT_GT(r.mtp_total, 0);
}

// The published config's parameters counted by hand from its sizes (no code shared with
// inspect), against the model card's 397B total and 17B activated.
TEST(Qwen35Moe, ParameterCountsByHand) {
  const nlohmann::json c = published();
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok());
  auto hp = (*a)->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const ParamReport r = inspect_params(*hp, (*a)->tensor_specs(*hp), c);
  const int64_t d = 4096, vocab = 248320, hd = 256, n_head = 32, n_kv = 2;
  const int64_t nk = 16, nv = 64, dk = 128, dv = 128, conv = 2 * nk * dk + nv * dv, kernel = 4;
  const int64_t embedding = vocab * d, lm_head = vocab * d, final_norm = d;
  const int64_t full = 2 * n_head * hd * d      // q_proj [q | gate] per head
                       + 2 * n_kv * hd * d       // k_proj, v_proj
                       + d * n_head * hd         // o_proj
                       + 2 * hd;                 // q_norm, k_norm
  const int64_t linear = conv * d                // in_proj_qkv
                         + nv * dv * d           // in_proj_z
                         + 2 * nv * d            // in_proj_b, in_proj_a
                         + conv * kernel         // conv1d [conv, 1, kernel]
                         + 2 * nv + dv           // dt_bias, A_log, the gated norm
                         + d * nv * dv;          // out_proj
  const int64_t one_expert = 3 * 1024 * d;
  const int64_t moe_common = 512 * d + one_expert + d;  // router, shared expert, its gate [1, d]
  const int64_t layer_norms = 2 * d;
  const int64_t text_common = embedding + lm_head + final_norm + 45 * linear + 15 * full + 60 * (layer_norms + moe_common);
  const int64_t vision_h = 1152, vision_ff = 4304, merged = 4 * vision_h;
  const int64_t vision = vision_h * 3 * 2 * 16 * 16 + vision_h + 2304 * vision_h +
                         27 * (4 * vision_h + 3 * vision_h * vision_h + 3 * vision_h + vision_h * vision_h + vision_h +
                               2 * vision_ff * vision_h + vision_ff + vision_h);
  const int64_t projector = 2 * vision_h + merged * merged + merged + d * merged + d;
  EXPECT_EQ(r.main.vision, vision);
  EXPECT_EQ(r.main.projector, projector);
  EXPECT_EQ(r.total, text_common + 60 * 512 * one_expert + vision + projector);
  EXPECT_EQ(r.activated, text_common + 60 * 10 * one_expert);
  EXPECT_EQ(r.activated_no_embedding, r.activated - embedding);
  // 396.80B total, 0.05% under the card's 397B.
  EXPECT_LE(std::fabs(static_cast<double>(r.total) - 397e9), 0.01 * 397e9) << r.total;
  // Activated per text token: 17,349,040,896 with both embedding matrices, 2.1% above the card's
  // 17B; no rule that holds for every family reaches 1% (docs/analysis.md): without the input
  // embedding it is 16.33B (3.9% under), with the vision tower 17.81B. Qwen's printed figures are
  // the count cut to the digits printed (3.35B -> A3B's "3.3B", 22.19B -> "22B", 17.35B -> "17B").
  EXPECT_GE(r.activated, int64_t{17} * 1000000000) << r.activated;
  EXPECT_LT(r.activated, int64_t{18} * 1000000000) << r.activated;
  EXPECT_LE(std::fabs(static_cast<double>(r.activated) - 17e9), 0.025 * 17e9) << r.activated;
  std::printf("Qwen3.5-397B-A17B: total %lld, activated %lld (without the input embedding %lld), vision %lld, "
              "projector %lld, mtp %lld\n",
              static_cast<long long>(r.total), static_cast<long long>(r.activated),
              static_cast<long long>(r.activated_no_embedding), static_cast<long long>(r.main.vision),
              static_cast<long long>(r.main.projector), static_cast<long long>(r.mtp_total));
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
