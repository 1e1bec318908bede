// glm_moe_dsa (GLM-5) from its published config and variants of it: the indexer sizes and rotary
// layout, indexer types as transformers derives them, the tensors of full and shared layers, the
// KV cache the planner counts per layer, the stage split that keeps a shared layer with the layer
// whose top-k it reuses, the runtime cache that holds what the planner counts, and the config keys
// refused with one sentence. Not the forward pass
// (tests/unit/runtime/reference_moe_mla_test.cpp, tests/e2e/hf_golden_test.cpp).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>

#include "backend/backend.h"
#include "model/registry.h"
#include "plan/memory.h"
#include "plan/planner.h"
#include "runtime/forward.h"

namespace dayzero::model {
namespace {

nlohmann::json glm5_config() {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/GLM-5/config.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

Result<HParams> parse(const nlohmann::json& c) {
  auto a = find_adapter(c);
  if (!a.ok()) return a.status();
  return (*a)->parse_hparams(c);
}

std::map<std::string, TensorSpec> specs_by_name(const nlohmann::json& c, const HParams& hp) {
  std::map<std::string, TensorSpec> by_name;
  for (const auto& s : (*find_adapter(c))->tensor_specs(hp)) by_name[s.name] = s;
  return by_name;
}

// GLM-5 as published: 78 layers, every one with an indexer (no indexer_types: transformers'
// default index_topk_freq 1), interleaved indexer rope, 3 dense layers, one MTP layer.
TEST(GlmMoeDsa, PublishedConfigParses) {
  const nlohmann::json c = glm5_config();
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "glm_moe_dsa");
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->deepseek().dsa.index_topk, 2048);
  EXPECT_EQ(hp->deepseek().dsa.index_n_heads, 32);
  EXPECT_EQ(hp->deepseek().dsa.index_head_dim, 128);
  EXPECT_TRUE(hp->deepseek().dsa.rope_interleave);
  EXPECT_TRUE(hp->deepseek().mla.rope_interleave);
  for (int l = 0; l < 78; ++l) EXPECT_TRUE(hp->deepseek().dsa.has_indexer(l)) << l;
  EXPECT_EQ(hp->dense_layers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hp->n_nextn_layer, 1);
  EXPECT_EQ(hp->rope_theta, 1e6);
  EXPECT_EQ(hp->rope_scaling.type, "default");
  EXPECT_NEAR(hp->deepseek().mla.softmax_scale, 1.0 / 16.0, 1e-12);  // qk_head_dim 256, no YaRN
  auto by_name = specs_by_name(c, *hp);
  const std::string p = "model.layers.5.self_attn.indexer.";
  ASSERT_TRUE(by_name.count(p + "wq_b.weight"));
  EXPECT_EQ(by_name[p + "wq_b.weight"].shape, (Shape{32 * 128, 2048}));
  EXPECT_EQ(by_name[p + "wk.weight"].shape, (Shape{128, 6144}));
  EXPECT_EQ(by_name[p + "weights_proj.weight"].shape, (Shape{32, 6144}));
  EXPECT_EQ(by_name["model.layers.5.mlp.experts.255.gate_proj.weight"].shape, (Shape{2048, 6144}));
  EXPECT_TRUE(by_name["model.layers.78.self_attn.indexer.wk.weight"].skip_load);
}

// indexer_types and the schedule transformers falls back to (index_topk_freq /
// index_skip_topk_offset, index_topk_pattern): a shared layer has no indexer tensors and keeps
// no indexer key in the cache the planner counts.
TEST(GlmMoeDsa, SharedLayersHaveNoIndexer) {
  nlohmann::json c = glm5_config();
  c["index_topk_freq"] = 4;  // offset 2: F F S S S F S S S F ...
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const std::vector<bool> want_shared = {false, false, true, true, true, false, true, true, true, false};
  for (int l = 0; l < 10; ++l) EXPECT_EQ(hp->deepseek().dsa.reuses_topk(l), want_shared[l]) << l;
  auto by_name = specs_by_name(c, *hp);
  EXPECT_TRUE(by_name.count("model.layers.1.self_attn.indexer.wk.weight"));
  EXPECT_FALSE(by_name.count("model.layers.2.self_attn.indexer.wk.weight"));
  EXPECT_TRUE(by_name.count("model.layers.2.self_attn.q_a_proj.weight"));
  const std::vector<LayerDesc> layers = (*find_adapter(c))->layer_kinds(*hp);
  EXPECT_EQ(layers[1].cache.index_dim, 128);
  EXPECT_EQ(layers[2].cache.index_dim, 0);
  EXPECT_TRUE(layers[1].stage_start());
  EXPECT_FALSE(layers[2].stage_start());

  c = glm5_config();
  c["index_topk_pattern"] = "F" + std::string(76, 'S') + "F";
  hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_TRUE(hp->deepseek().dsa.has_indexer(0));
  EXPECT_TRUE(hp->deepseek().dsa.reuses_topk(1));
  EXPECT_TRUE(hp->deepseek().dsa.has_indexer(77));
  // 2 of 78 layers hold an indexer key: the planner's cache per token is 76 x 128 elements smaller.
  plan::MemoryParams mp;
  mp.max_context_tokens = 1;
  mp.bytes_per_activation = 1;
  mp.cache = plan::layer_caches((*find_adapter(c))->layer_kinds(*hp));
  const int64_t all_full = parse(glm5_config())->n_layer * (2 * 64 * 256 + 128);
  EXPECT_EQ(plan::stage_cache(0, 78, 1, mp).kv, all_full - 76 * 128);

  c = glm5_config();
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 78; ++l) types.push_back(l % 2 ? "shared" : "full");
  c["indexer_types"] = types;
  c["mlp_layer_types"] = nlohmann::json::array();
  for (int l = 0; l < 78; ++l) c["mlp_layer_types"].push_back(l == 0 || l == 5 ? "dense" : "sparse");
  hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_TRUE(hp->deepseek().dsa.reuses_topk(77));
  EXPECT_FALSE(hp->deepseek().dsa.reuses_topk(76));
  EXPECT_EQ(hp->dense_layers, (std::vector<int>{0, 5}));
}

// The runtime's cache of the tiny model (indexer types full, shared, full, shared): indexer keys in
// layers 0 and 2 only, and exactly the bytes the memory model counts for them.
TEST(GlmMoeDsa, RuntimeCacheHoldsWhatThePlannerCounts) {
  const Adapter& a = **find_adapter_by_family("glm_moe_dsa");
  ModelShape shape;
  shape.n_layer = 4;
  shape.n_head_kv = shape.n_head;
  a.fill_tiny_defaults(shape);
  auto hp = a.parse_hparams(a.make_config(shape));
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok()) << be.status().message();
  const Weights w;
  runtime::Forward fwd(**be, a, *hp, w);
  runtime::KvCache cache = fwd.new_cache(16);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(cache.index_k(l) != nullptr, l % 2 == 0) << "layer " << l;
  ASSERT_NE(cache.index_k(2), nullptr);
  EXPECT_EQ(cache.index_k(2)->shape(), (Shape{16, 16}));
  plan::MemoryParams mp;
  mp.max_context_tokens = 16;
  mp.bytes_per_activation = 4;
  mp.cache = plan::layer_caches(a.layer_kinds(*hp));
  EXPECT_EQ(cache.bytes(), plan::stage_cache(0, 4, 1, mp).kv);
  EXPECT_EQ(plan::stage_cache(0, 4, 1, mp).kv, 4 * 16 * 4 * (2 * 4 * hp->head_dim) + 2 * 16 * 4 * 16);
}

// A shared layer stays on the stage of the layer whose top-k it reuses: stages are cut only
// before full layers, and more stages than full runs are refused.
TEST(GlmMoeDsa, StagesStartAtFullLayers) {
  nlohmann::json c = glm5_config();
  c["num_hidden_layers"] = 6;
  c["index_topk_pattern"] = "FSSSSF";  // a balanced split would cut at 3
  c["num_nextn_predict_layers"] = 0;
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  plan::PlanRequest req;
  req.hp = *hp;
  req.specs = (*find_adapter(c))->tensor_specs(*hp);
  req.layer_descs = describe_layers(**find_adapter(c), *hp, req.specs);
  req.topo.nodes = 1;
  req.topo.gpus_per_node = 8;
  req.topo.device_memory_bytes = int64_t{1} << 50;
  req.world_size = 2;
  req.pp = 2;
  req.tp = 1;
  auto p = plan::choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_EQ(p->stages[1].layer_begin, 5);
  req.world_size = 3;
  req.pp = 3;
  auto refused = plan::choose_plan(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("only 2 of the 6 layers can start one"), std::string::npos)
      << refused.status().message();
  req.pp = 1;
  req.world_size = 1;
  req.layers = std::pair<int, int>{1, 4};
  refused = plan::choose_plan(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("layer 1 reuses the previous layer's DSA top-k"), std::string::npos)
      << refused.status().message();
}

// Each bad key: one sentence naming it, exit code 2 (bad input).
TEST(GlmMoeDsa, RefusesBadIndexerKeys) {
  struct Bad {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> named;
  };
  const Bad cases[] = {
      {"index_topk 0", [](nlohmann::json& c) { c["index_topk"] = 0; }, {"index_topk"}},
      {"index_topk -1", [](nlohmann::json& c) { c["index_topk"] = -1; }, {"index_topk"}},
      {"indexer_types too short", [](nlohmann::json& c) { c["indexer_types"] = {"full", "shared"}; },
       {"indexer_types", "2 entries", "num_hidden_layers 78"}},
      {"indexer_types entry", [](nlohmann::json& c) {
         c["indexer_types"] = nlohmann::json::array();
         for (int l = 0; l < 78; ++l) c["indexer_types"].push_back(l == 3 ? "sparse" : "full");
       }, {"indexer_types", "\"sparse\""}},
      {"shared first layer", [](nlohmann::json& c) { c["index_topk_pattern"] = std::string(78, 'S'); },
       {"layer 0", "shared"}},
      {"pattern length", [](nlohmann::json& c) { c["index_topk_pattern"] = "FS"; }, {"index_topk_pattern", "2 letters"}},
      {"mlp_layer_types length", [](nlohmann::json& c) { c["mlp_layer_types"] = {"dense"}; }, {"mlp_layer_types"}},
      {"layer_types entry", [](nlohmann::json& c) {
         c["layer_types"] = nlohmann::json::array();
         for (int l = 0; l < 78; ++l) c["layer_types"].push_back("sliding_attention");
       }, {"layer_types"}},
      {"indexer rope not interleaved", [](nlohmann::json& c) { c["indexer_rope_interleave"] = false; },
       {"indexer_rope_interleave"}},
      {"MLA rope not interleaved", [](nlohmann::json& c) { c["rope_interleave"] = false; }, {"rope_interleave"}},
      {"no q LoRA", [](nlohmann::json& c) { c["q_lora_rank"] = nullptr; }, {"q_lora_rank"}},
  };
  for (const Bad& b : cases) {
    nlohmann::json c = glm5_config();
    b.edit(c);
    auto hp = parse(c);
    ASSERT_FALSE(hp.ok()) << b.what;
    EXPECT_EQ(hp.status().exit_code(), 2) << b.what;
    const std::string& m = hp.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << b.what << ": " << m;
    for (const auto& n : b.named) EXPECT_NE(m.find(n), std::string::npos) << b.what << ": " << m;
  }
}

}  // namespace
}  // namespace dayzero::model
