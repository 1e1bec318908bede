// model/inspect: parameter counts of real configs (no weights) against counts written out by
// hand from each architecture's tensor shapes and against the published sizes; MTP layers
// and FP8 block scales kept out of the total; the feature list.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "model/inspect.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

struct Inspected {
  HParams hp;
  ParamReport r;
};

Inspected inspect_config(const std::string& name) {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  const nlohmann::json c = nlohmann::json::parse(f);
  auto a = find_adapter(c);
  EXPECT_TRUE(a.ok()) << a.status().message();
  auto hp = (*a)->parse_hparams(c);
  EXPECT_TRUE(hp.ok()) << hp.status().message();
  return {*hp, inspect_params(*hp, (*a)->tensor_specs(*hp), c)};
}

void expect_within(double got, double want, double rel, const char* what) {
  EXPECT_LE(std::fabs(got - want), rel * want) << what << ": " << got << " vs " << want;
}

const Feature* feature(const ParamReport& r, const std::string& name) {
  for (const auto& f : r.features)
    if (f.name == name) return &f;
  return nullptr;
}

// DeepSeek-V3 / Kimi-K2 share the architecture; the sizes differ.
struct MlaMoeSizes {
  int64_t d, vocab, n_layer, n_dense, n_ff, n_head, q_lora, kv_lora, nope, rope, v, n_expert, ff_expert, n_shared,
      k, n_mtp;
};

struct HandCount {
  int64_t total, activated, activated_no_embedding, mtp, routed, embedding;
};

HandCount hand_count(const MlaMoeSizes& s) {
  const int64_t d = s.d, qk = s.nope + s.rope;
  const int64_t embedding = s.vocab * d;                           // model.embed_tokens [vocab, d]
  const int64_t lm_head = s.vocab * d;                             // lm_head [vocab, d] (untied)
  const int64_t final_norm = d;                                    // model.norm [d]
  const int64_t mla = s.q_lora * d                                 // q_a_proj [q_lora, d]
                      + s.n_head * qk * s.q_lora                   // q_b_proj [n_head * 192, q_lora]
                      + (s.kv_lora + s.rope) * d                   // kv_a_proj_with_mqa [kv_lora + rope, d]
                      + s.n_head * (s.nope + s.v) * s.kv_lora      // kv_b_proj [n_head * (nope + v), kv_lora]
                      + d * s.n_head * s.v;                        // o_proj [d, n_head * v]
  const int64_t layer_norms = d + d + s.q_lora + s.kv_lora;       // input, post_attention, q_a, kv_a norms
  const int64_t dense_mlp = 3 * s.n_ff * d;                        // gate/up [n_ff, d], down [d, n_ff]
  const int64_t router = s.n_expert * d + s.n_expert;             // gate [n_expert, d] + e_score_correction_bias
  const int64_t one_expert = 3 * s.ff_expert * d;                  // gate/up [ff, d], down [d, ff]
  const int64_t routed = s.n_expert * one_expert;
  const int64_t shared = 3 * s.n_shared * s.ff_expert * d;
  const int64_t n_moe = s.n_layer - s.n_dense;

  const int64_t common = embedding + lm_head + final_norm + s.n_layer * (mla + layer_norms) + s.n_dense * dense_mlp +
                         n_moe * (router + shared);
  HandCount h;
  h.total = common + n_moe * routed;
  h.activated = common + n_moe * s.k * one_expert;
  h.activated_no_embedding = h.activated - embedding;
  h.routed = n_moe * routed;
  h.embedding = embedding;
  // An MTP layer: a full MoE decoder layer plus enorm, hnorm [d], eh_proj [d, 2d], its own
  // embed_tokens [vocab, d], shared_head.norm [d] and shared_head.head [vocab, d].
  const int64_t mtp_layer = mla + layer_norms + router + routed + shared + d + d + d * 2 * d + s.vocab * d + d +
                            s.vocab * d;
  h.mtp = s.n_mtp * mtp_layer;
  return h;
}

TEST(Inspect, DeepseekV3CountsByHand) {
  const Inspected x = inspect_config("DeepSeek-V3");
  const ParamReport& r = x.r;
  const HandCount h = hand_count({7168, 129280, 61, 3, 18432, 128, 1536, 512, 128, 64, 128, 256, 2048, 1, 8, 1});
  EXPECT_EQ(r.total, h.total);
  EXPECT_EQ(r.activated, h.activated);
  EXPECT_EQ(r.activated_no_embedding, h.activated_no_embedding);
  EXPECT_EQ(r.main.routed_experts, h.routed);
  EXPECT_EQ(r.main.embedding, h.embedding);
  EXPECT_EQ(r.mtp_total, h.mtp);
  EXPECT_EQ(r.n_moe_layers, 58);
  expect_within(static_cast<double>(r.total), 671e9, 0.005, "total");
  expect_within(static_cast<double>(r.activated_no_embedding), 36.6e9, 0.01, "activated without embedding");
  // 685B published = main + MTP.
  expect_within(static_cast<double>(r.total + r.mtp_total), 685e9, 0.005, "main + mtp");

  // FP8: every decoder-layer Linear quantized, its scales metadata, not parameters.
  EXPECT_EQ(r.quant_method, "fp8");
  EXPECT_EQ(r.quant_block_rows, 128);
  EXPECT_GT(r.scale_tensors, 0);
  EXPECT_GT(r.scale_bytes, 0u);
  EXPECT_EQ(r.main.other, 0);
  EXPECT_EQ(r.mtp.other, 0);

  ASSERT_NE(feature(r, "MLA"), nullptr);
  ASSERT_NE(feature(r, "MoE sigmoid routing"), nullptr);
  ASSERT_NE(feature(r, "group-limited routing"), nullptr);
  ASSERT_NE(feature(r, "shared experts"), nullptr);
  ASSERT_NE(feature(r, "FP8 block scales"), nullptr);
  EXPECT_EQ(feature(r, "FP8 block scales")->support, Support::kYes);
  ASSERT_NE(feature(r, "MTP"), nullptr);
  EXPECT_EQ(feature(r, "MTP")->support, Support::kSkipped);
  EXPECT_EQ(feature(r, "RoPE scaling")->detail.rfind("yarn", 0), 0u);
  EXPECT_EQ(feature(r, "GQA"), nullptr);
}

TEST(Inspect, KimiK2CountsByHand) {
  const Inspected x = inspect_config("Kimi-K2-Instruct");
  const ParamReport& r = x.r;
  const HandCount h = hand_count({7168, 163840, 61, 1, 18432, 64, 1536, 512, 128, 64, 128, 384, 2048, 1, 8, 0});
  EXPECT_EQ(r.total, h.total);
  EXPECT_EQ(r.activated, h.activated);
  EXPECT_EQ(r.activated_no_embedding, h.activated_no_embedding);
  EXPECT_EQ(r.mtp_total, 0);
  expect_within(static_cast<double>(r.total), 1.0e12, 0.03, "total");
  expect_within(static_cast<double>(r.activated), 32e9, 0.03, "activated");
  EXPECT_EQ(feature(r, "group-limited routing"), nullptr);  // n_group 1
  EXPECT_EQ(feature(r, "MTP"), nullptr);
}

TEST(Inspect, Llama405bIsDense) {
  const Inspected x = inspect_config("Meta-Llama-3.1-405B");
  const ParamReport& r = x.r;
  EXPECT_EQ(r.total, 405853388800);
  EXPECT_EQ(r.activated, r.total);
  EXPECT_EQ(r.activated_no_embedding, r.total - 128256LL * 16384);
  EXPECT_EQ(r.main.routed_experts, 0);
  EXPECT_EQ(r.n_moe_layers, 0);
  EXPECT_EQ(r.scale_tensors, 0);
  EXPECT_TRUE(r.quant_method.empty());
  ASSERT_NE(feature(r, "GQA"), nullptr);
  EXPECT_EQ(feature(r, "RoPE scaling")->detail.rfind("llama3", 0), 0u);
  // Estimated storage from torch_dtype: bf16, 2 bytes a parameter.
  EXPECT_EQ(r.dtype_source, "config");
  EXPECT_EQ(r.weight_bytes, 2u * 405853388800u);
}

TEST(Inspect, Qwen3MoeSizes) {
  const Inspected x = inspect_config("Qwen3-30B-A3B");
  const ParamReport& r = x.r;
  expect_within(static_cast<double>(r.total), 30.5e9, 0.01, "total");
  expect_within(static_cast<double>(r.activated), 3.3e9, 0.03, "activated");
  EXPECT_EQ(r.n_moe_layers, 48);
  ASSERT_NE(feature(r, "MoE softmax routing"), nullptr);
  ASSERT_NE(feature(r, "q/k norm"), nullptr);
  // The FP8 release: quantization read from config.json, and no scale tensors declared by the
  // qwen3_moe adapter, so the feature is marked unsupported.
  const Inspected q = inspect_config("Qwen3-30B-A3B-FP8");
  EXPECT_EQ(q.r.total, r.total);
  EXPECT_EQ(q.r.quant_method, "fp8");
  ASSERT_NE(feature(q.r, "FP8 block scales"), nullptr);
  EXPECT_EQ(feature(q.r, "FP8 block scales")->support, Support::kNo);
}

TEST(Inspect, TiedEmbeddingsStayInTheActivatedCount) {
  const Inspected x = inspect_config("Qwen3-0.6B");
  EXPECT_EQ(x.r.main.lm_head, 0);
  EXPECT_EQ(x.r.activated_no_embedding, x.r.activated);
  ASSERT_NE(feature(x.r, "tied embeddings"), nullptr);
}

TEST(Inspect, JsonCarriesTheFigures) {
  const Inspected x = inspect_config("DeepSeek-V3");
  const nlohmann::json j = to_json(x.r);
  EXPECT_EQ(j["total"].get<int64_t>(), x.r.total);
  EXPECT_EQ(j["parameters"]["routed_experts"].get<int64_t>(), x.r.main.routed_experts);
  EXPECT_EQ(j["parameters"]["mtp"]["total"].get<int64_t>(), x.r.mtp_total);
  EXPECT_EQ(j["quantization"]["scale_tensors"].get<int64_t>(), x.r.scale_tensors);
  EXPECT_TRUE(j["features"].is_array());
}

}  // namespace
}  // namespace dayzero::model
