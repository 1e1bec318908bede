// Adapters and the registry on real configs: family resolution, tensor inventories and
// parameter counts, RoPE frequency tables against values printed by transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "model/registry.h"

namespace dayzero::model {
namespace {

nlohmann::json read_config(const std::string& name) {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

TEST(Registry, UnknownArchitectureListsSupported) {
  auto a = find_adapter({{"model_type", "gpt_neox"}, {"architectures", {"GPTNeoXForCausalLM"}}});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().exit_code(), 2);
  EXPECT_NE(a.status().message().find("gpt_neox"), std::string::npos);
  EXPECT_NE(a.status().message().find("llama, qwen2, qwen3, mixtral, qwen3_moe"), std::string::npos) << a.status().message();
}

TEST(Registry, ResolvesByArchitectureName) {
  auto a = find_adapter({{"model_type", "custom"}, {"architectures", {"Qwen2ForCausalLM"}}});
  ASSERT_TRUE(a.ok());
  EXPECT_STREQ((*a)->family(), "qwen2");
}

TEST(Llama, Llama31_405BInventory) {
  const auto cfg = read_config("Meta-Llama-3.1-405B");
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok());
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->rope_scaling.type, "llama3");
  const auto specs = (*a)->tensor_specs(*hp);
  EXPECT_EQ(specs.size(), 3u + 9u * 126u);
  int64_t params = 0;
  for (const auto& s : specs) params += shape_numel(s.shape);
  // By hand: embed + lm_head 2*128256*16384; per layer q,o 2*16384^2, k,v 2*1024*16384,
  // gate,up,down 3*53248*16384, two norms 2*16384; final norm 16384.
  const int64_t per_layer = 2LL * 16384 * 16384 + 2LL * 1024 * 16384 + 3LL * 53248 * 16384 + 2LL * 16384;
  EXPECT_EQ(params, 2LL * 128256 * 16384 + 126 * per_layer + 16384);
  EXPECT_EQ(params, 405853388800LL);  // the published 405B
}

// Every real config passes; a layer or expert count that would list millions of tensors is
// refused before tensor_specs runs (fuzzing config.json found inspect busy for minutes on
// "num_hidden_layers": 100000000). Control: Kimi-K2, the largest inventory, is well inside.
TEST(HParams, AbsurdTensorCountsAreRefused) {
  for (const char* name : {"Kimi-K2-Instruct", "DeepSeek-V3", "Meta-Llama-3.1-405B", "Qwen3-235B-A22B", "Mixtral-8x22B-v0.1"}) {
    const auto cfg = read_config(name);
    auto hp = (*find_adapter(cfg))->parse_hparams(cfg);
    ASSERT_TRUE(hp.ok()) << name;
    EXPECT_TRUE(check_tensor_count(*hp).ok()) << name;
  }
  auto cfg = read_config("Qwen3-0.6B");
  cfg["num_hidden_layers"] = 100000000;
  auto hp = (*find_adapter(cfg))->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok());
  const Status s = check_tensor_count(*hp);
  EXPECT_EQ(s.exit_code(), 2);
  EXPECT_NE(s.message().find("num_hidden_layers (100000000)"), std::string::npos) << s.message();
  auto moe = read_config("Kimi-K2-Instruct");
  moe["n_routed_experts"] = 1000000;
  auto hp_moe = (*find_adapter(moe))->parse_hparams(moe);
  ASSERT_TRUE(hp_moe.ok()) << hp_moe.status().message();
  EXPECT_FALSE(check_tensor_count(*hp_moe).ok());
}

TEST(Llama, Llama3RopeMatchesTransformers) {
  const auto cfg = read_config("Meta-Llama-3.1-405B");
  auto hp = (*find_adapter(cfg))->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok());
  const auto inv = rope_inv_freq(*hp);
  ASSERT_EQ(inv.size(), 64u);
  // transformers 5.24 ROPE_INIT_FUNCTIONS["llama3"] on this config (f32 values).
  const std::pair<int, double> expected[] = {{0, 1.0},
                                             {1, 0.8146172165870667},
                                             {10, 0.12868738174438477},
                                             {20, 0.016560440883040428},
                                             {30, 0.0013718936825171113},
                                             {40, 3.428102354519069e-05},
                                             {45, 1.2297638932068367e-05},
                                             {50, 4.411534519022098e-06},
                                             {63, 3.068925877869333e-07}};
  for (const auto& [i, v] : expected) EXPECT_NEAR(inv[i], v, 1e-6 * v) << "inv_freq[" << i << "]";
}

TEST(Qwen3, QkNormAndHeadDim) {
  const auto cfg = read_config("Qwen3-0.6B");
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok());
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_TRUE(hp->qk_norm);
  EXPECT_EQ(hp->head_dim, 128);
  EXPECT_TRUE(hp->tie_embeddings);
  int64_t params = 0;
  for (const auto& s : (*a)->tensor_specs(*hp)) params += shape_numel(s.shape);
  EXPECT_EQ(params, 596049920LL);  // Qwen3-0.6B: 0.6B with tied embeddings
}

// A key present with the wrong type is an error naming it, never the default; null is absent.
TEST(HParams, CheckedReadsRefuseWrongTypes) {
  const nlohmann::json c = {{"n", 3}, {"s", "3"}, {"f", 1.5}, {"b", true}, {"z", nullptr}, {"l", {1, 2}}, {"o", {{"k", 1}}}};
  EXPECT_EQ(*json_int_or(c, "n", 7), 3);
  EXPECT_EQ(*json_int_or(c, "absent", 7), 7);
  EXPECT_EQ(*json_int_or(c, "z", 7), 7);
  EXPECT_EQ(*json_double_or(c, "n", 0), 3.0);
  EXPECT_EQ(*json_bool_or(c, "z", true), true);
  EXPECT_EQ(*json_string_or(c, "s", ""), "3");
  EXPECT_EQ(*json_int_list_or_empty(c, "l"), (std::vector<int64_t>{1, 2}));
  const auto bad = [](const Status& s, const std::string& key, const std::string& got) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.exit_code(), 2);
    EXPECT_NE(s.message().find("config.json: key '" + key + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(got), std::string::npos) << s.message();
  };
  bad(json_int_or(c, "s", 7).status(), "s", "got a string (\"3\")");
  bad(json_int_or(c, "f", 7).status(), "f", "got a number");
  bad(json_double_or(c, "s", 1).status(), "s", "got a string");
  bad(json_bool_or(c, "n", false).status(), "n", "got an integer");
  bad(json_string_or(c, "o", "").status(), "o", "got an object (an object of 1)");
  bad(json_int_list_or_empty(c, "o").status(), "o", "a list of integers");
  bad(json_int(c, "s").status(), "s", "a positive integer");
  EXPECT_EQ(json_int(c, "z").status().message(), "config.json: missing required key 'z'");
}

TEST(HParams, MistypedConfigValuesAreRefusedByEveryAdapter) {
  for (const std::string& family : supported_families()) {
    SCOPED_TRACE(family);
    const Adapter* a = *find_adapter_by_family(family);
    ModelShape shape;
    a->fill_tiny_defaults(shape);
    const nlohmann::json good = a->make_config(shape);
    ASSERT_TRUE(a->parse_hparams(good).ok());
    // Every integer, number, boolean or string at the top level, turned into a list.
    for (const auto& [key, value] : good.items()) {
      if (value.is_null() || value.is_array() || value.is_object() || key == "architectures") continue;
      nlohmann::json c = good;
      c[key] = nlohmann::json::array({value});
      auto hp = a->parse_hparams(c);
      // A key the adapter does not read may take any value; one it reads must be refused by name.
      if (!hp.ok()) {
        EXPECT_EQ(hp.status().exit_code(), 2);
        EXPECT_NE(hp.status().message().find("'" + key + "'"), std::string::npos) << hp.status().message();
      }
    }
    if (good.contains("text_config")) continue;  // the sizes live in text_config
    nlohmann::json wrong = good;
    wrong["hidden_size"] = "64";
    auto hp = a->parse_hparams(wrong);
    ASSERT_FALSE(hp.ok());
    EXPECT_NE(hp.status().message().find("'hidden_size'"), std::string::npos) << hp.status().message();
  }
  // deepseek_v3: q_lora_rank null is a plain q_proj, as in DeepSeek-V2-Lite.
  const Adapter* ds = *find_adapter_by_family("deepseek_v3");
  ModelShape shape;
  ds->fill_tiny_defaults(shape);
  nlohmann::json c = ds->make_config(shape);
  c["q_lora_rank"] = nullptr;
  auto hp = ds->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->deepseek().mla.q_lora_rank, 0);
}

TEST(HParams, RejectsBadHeadCounts) {
  nlohmann::json c = {{"model_type", "llama"}, {"vocab_size", 10}, {"hidden_size", 48}, {"num_hidden_layers", 1},
                      {"num_attention_heads", 6}, {"num_key_value_heads", 4}, {"intermediate_size", 8}};
  auto hp = (*find_adapter(c))->parse_hparams(c);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("num_key_value_heads"), std::string::npos);
}

}  // namespace
}  // namespace dayzero::model

namespace dayzero::model {
namespace {

// The mixtral adapter's inventory for WizardLM-2-8x22B is exactly the keys of the real
// checkpoint's index, and their bf16 bytes add up to its metadata.total_size.
TEST(Mixtral, WizardLm2InventoryMatchesTheRealIndex) {
  const std::string dir = std::string(DAYZERO_FIXTURES_DIR) + "/configs/WizardLM-2-8x22B/";
  const auto cfg = read_config("WizardLM-2-8x22B");
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok());
  EXPECT_STREQ((*a)->family(), "mixtral");
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  std::ifstream f(dir + "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(f);
  std::set<std::string> real;
  for (const auto& [name, file] : index["weight_map"].items()) real.insert(name);
  std::set<std::string> ours;
  int64_t bytes = 0;
  for (const auto& s : (*a)->tensor_specs(*hp)) {
    ours.insert(s.name);
    bytes += shape_numel(s.shape) * 2;
  }
  EXPECT_EQ(real.size(), 1739u);
  std::vector<std::string> missing, extra;
  std::set_difference(real.begin(), real.end(), ours.begin(), ours.end(), std::back_inserter(missing));
  std::set_difference(ours.begin(), ours.end(), real.begin(), real.end(), std::back_inserter(extra));
  EXPECT_TRUE(missing.empty()) << missing.size() << " real tensors not expected, first " << missing.front();
  EXPECT_TRUE(extra.empty()) << extra.size() << " expected tensors not in the checkpoint, first " << extra.front();
  EXPECT_EQ(bytes, index["metadata"]["total_size"].get<int64_t>());
}

}  // namespace
}  // namespace dayzero::model
