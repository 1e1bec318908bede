// dayzero inspect: a bare config.json (--json, parsed back), a folder holding only config.json,
// a generated checkpoint (figures plus the tensor check), an unknown architecture (the generic
// analysis, exit 0), an unknown architecture whose config lacks its sizes (exit 2), and the
// register: two models registered twice, --markdown, a malformed register refused unchanged.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

std::string fixture_config(const std::string& name) {
  return std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json";
}

nlohmann::json parse_json(const Outcome& o) {
  try {
    return nlohmann::json::parse(o.output);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << o.output;
    return {};
  }
}

TEST(InspectCli, BareConfigJson) {
  const Outcome o = run_dayzero("inspect " + fixture_config("Meta-Llama-3.1-405B") + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const nlohmann::json j = parse_json(o);
  EXPECT_EQ(j["family"], "llama");
  EXPECT_EQ(j["total"].get<int64_t>(), 405853388800);
  EXPECT_EQ(j["activated"].get<int64_t>(), 405853388800);
  EXPECT_EQ(j["weights"], false);
  EXPECT_EQ(j["dtype_source"], "config");
}

TEST(InspectCli, FolderWithOnlyConfigAndText) {
  const fs::path d = scratch_dir("inspect_config_only");
  fs::copy_file(fixture_config("DeepSeek-V3"), d / "config.json");
  const Outcome j = run_dayzero("inspect " + d.string() + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json v = parse_json(j);
  EXPECT_GT(v["mtp_total"].get<int64_t>(), 0);
  EXPECT_GT(v["quantization"]["scale_bytes"].get<int64_t>(), 0);
  const Outcome t = run_dayzero("inspect " + d.string());
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("activated/token"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("MTP"), std::string::npos) << t.output;
}

TEST(InspectCli, CheckpointFolderRunsTheTensorCheck) {
  const fs::path d = scratch_dir("inspect_checkpoint");
  make_model_from_yaml(golden_sizes("deepseek_v3_fp8"), d / "model");
  const Outcome o = run_dayzero("inspect " + (d / "model").string() + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const nlohmann::json j = parse_json(o);
  EXPECT_EQ(j["weights"], true);
  EXPECT_EQ(j["check"], "ok");
  EXPECT_EQ(j["dtype_source"], "checkpoint");
  EXPECT_TRUE(j["dtypes"].contains("F8_E4M3")) << j["dtypes"].dump();
  EXPECT_GT(j["quantization"]["scale_tensors"].get<int64_t>(), 0);
}

// A qwen3_moe with MXFP4 experts (make-model --dtype mxfp4): its companions' dtypes from the
// headers and from config.json alone agree (U8 codes and exponents), the experts count as
// quantized parameters, the tensor check passes, and the feature is named supported.
TEST(InspectCli, Mxfp4ExpertsFromHeadersAndFromConfig) {
  const fs::path d = scratch_dir("inspect_mxfp4");
  write_file(d / "sizes.yaml", "family: qwen3_moe\ndtype: mxfp4\nn_layer: 2\nseed: 5\n");
  make_model_from_yaml(d / "sizes.yaml", d / "model");
  const Outcome o = run_dayzero("inspect " + (d / "model").string() + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const nlohmann::json j = parse_json(o);
  EXPECT_EQ(j["check"], "ok");
  ASSERT_TRUE(j["dtypes"].contains("U8")) << j["dtypes"].dump();
  EXPECT_GT(j["quantization"]["quantized_params"].get<int64_t>(), 0);
  fs::create_directories(d / "config-only");
  fs::copy_file(d / "model" / "config.json", d / "config-only" / "config.json");
  const Outcome c = run_dayzero("inspect " + (d / "config-only").string() + " --json");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json k = parse_json(c);
  EXPECT_EQ(k["dtypes"]["U8"], j["dtypes"]["U8"]) << k["dtypes"].dump() << " vs " << j["dtypes"].dump();
  EXPECT_EQ(k["quantization"]["quantized_params"], j["quantization"]["quantized_params"]);
  const Outcome t = run_dayzero("inspect " + (d / "model").string());
  EXPECT_NE(t.output.find("FP4 weights           supported"), std::string::npos) << t.output;
}

TEST(InspectCli, LlavaCountsItsVisionTowerAndProjector) {
  const Outcome o = run_dayzero("inspect --json " + fixture_config("llava-1.5-7b-hf"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const nlohmann::json r = parse_json(o);
  // CLIP ViT-L/14-336 (24 layers, post_layernorm included) and the 1024 -> 4096 -> 4096 projector.
  EXPECT_EQ(r["parameters"]["vision"].get<int64_t>(), 303507456) << r["parameters"].dump();
  EXPECT_EQ(r["parameters"]["projector"].get<int64_t>(), 1024 * 4096 + 4096 + 4096 * 4096 + 4096) << r["parameters"].dump();
  const Outcome t = run_dayzero("inspect " + fixture_config("llava-1.5-7b-hf"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("projector"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("vision tower"), std::string::npos) << t.output;
}

// GLM-5's config renamed to a family no adapter claims (glm_moe_dsa has one).
TEST(InspectCli, UnknownArchitectureGetsTheGenericAnalysis) {
  std::ifstream published(fixture_config("GLM-5"));
  nlohmann::json c = nlohmann::json::parse(published);
  c["model_type"] = "sparse_mla_preview";
  c["architectures"] = {"SparseMlaPreviewForCausalLM"};
  const fs::path d = scratch_dir("inspect_unknown_dsa");
  std::ofstream(d / "config.json") << c.dump();
  const Outcome o = run_dayzero("inspect " + (d / "config.json").string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("unknown architecture"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("needs a new block"), std::string::npos) << o.output;
  const Outcome j = run_dayzero("inspect --json " + (d / "config.json").string());
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json r = parse_json(j);
  EXPECT_EQ(r["source"], "config estimate");
  bool dsa = false;
  for (const auto& f : r["features"]) dsa = dsa || (f["name"] == "sparse attention indexer (DSA)" && f["status"] == "needs a new block");
  EXPECT_TRUE(dsa) << r["features"].dump();
}

// The published DSA configs: their adapters' totals (MTP apart; the generic analysis agrees,
// docs/analysis.md) and the indexer marked supported by the adapter.
TEST(InspectCli, SparseAttentionFamiliesAreSupported) {
  const std::pair<std::string, int64_t> models[] = {{"DeepSeek-V3.2", 671877944064}, {"GLM-5", 743911218432}};
  for (const auto& [m, total] : models) {
    const Outcome j = run_dayzero("inspect --json " + fixture_config(m));
    ASSERT_EQ(j.exit_code, 0) << j.output;
    const nlohmann::json r = parse_json(j);
    EXPECT_EQ(r["total"], total) << m;
    EXPECT_EQ(r["analysis"]["total"], total) << m;
    bool dsa = false;
    for (const auto& f : r["analysis"]["features"]) {
      EXPECT_NE(f["status"], "needs a new block") << m << ": " << f.dump();
      dsa = dsa || (f["name"] == "sparse attention indexer (DSA)" && f["status"] == "supported by adapter");
    }
    EXPECT_TRUE(dsa) << m << ": " << r.dump();
  }
}

// Hybrid linear attention: the cache line counts KV bytes per token for the 15 full-attention
// layers (2 kv heads x 256 x k and v x bf16) and state bytes per sequence for the 45 Gated
// DeltaNet layers ((4 - 1) x 12288 bf16 conv window + 64 x 128 x 128 f32 state each); the
// feature list marks Gated DeltaNet supported (by the qwen3_5_moe adapter).
TEST(InspectCli, HybridModelReportsKvPerTokenAndStatePerSequence) {
  const Outcome o = run_dayzero("inspect " + fixture_config("Qwen3.5-397B-A17B"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const int64_t state = 45 * (3 * 12288 * 2 + 64 * 128 * 128 * 4);
  EXPECT_NE(o.output.find("cache       30720 KV bytes per token (15 attention layers), " + std::to_string(state) +
                          " state bytes per sequence (45 linear-attention layers)"),
            std::string::npos)
      << o.output;
  const Outcome j = run_dayzero("inspect --json " + fixture_config("Qwen3.5-397B-A17B"));
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json r = parse_json(j);
  bool gdn = false;
  for (const auto& f : r["analysis"]["features"])
    gdn = gdn || (f["name"] == "linear attention (Gated DeltaNet)" && f["status"] == "supported by adapter");
  EXPECT_TRUE(gdn) << r["features"].dump();
}

TEST(InspectCli, UnknownArchitectureWithoutSizesIsBadInput) {
  const std::string path = ::testing::TempDir() + "dayzero-inspect-nosizes.json";
  std::ofstream(path) << R"({"model_type": "brand_new", "hidden_size": "wide"})";
  const Outcome o = run_dayzero("inspect " + path);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("hidden_size"), std::string::npos) << o.output;
}

std::string fixture_dir(const std::string& name) {
  return std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name;
}

YAML::Node load_yaml(const fs::path& p) {
  try {
    return YAML::LoadFile(p.string());
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << p << ": " << e.what();
    return {};
  }
}

// --modeling: transformers' modeling file of a family without an adapter is accounted for module
// by module; the register keeps the unmatched ones with their lines and every unrecognised key.
TEST(InspectCli, ModelingOptionAccountsForEveryModule) {
  const std::string modeling = std::string(DAYZERO_FIXTURES_DIR) + "/modeling/deepseek_v4";
  const Outcome j = run_dayzero("inspect --json " + fixture_dir("DeepSeek-V4-Flash") + " --modeling " + modeling);
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json whole = parse_json(j);
  // A family with an adapter (deepseek_v4 reads the config, its run is refused) nests the
  // generic analysis under "analysis"; a family without one is the analysis.
  const nlohmann::json r = whole.contains("analysis") ? whole["analysis"] : whole;
  ASSERT_EQ(r["modeling"].size(), 1u) << r["modeling"].dump();
  bool hc = false;
  for (const auto& m : r["modeling"][0]["modules"])
    hc = hc || (m["name"] == "DeepseekV4HyperConnection" && m["line"] == 884 && m["matched"] == false);
  EXPECT_TRUE(hc) << r["modeling"][0]["modules"].dump();
  EXPECT_FALSE(r["keys"]["unrecognised"].contains("scoring_func")) << r["keys"].dump();  // sqrtsoftplus is run
  EXPECT_TRUE(r["keys"]["irrelevant"].contains("router_aux_loss_coef")) << r["keys"].dump();
  // The deepseek_v4 adapter runs the config (its golden test proves it): the hyper-connections
  // are supported by it even where the modeling scan leaves their module unmatched.
  bool hc_supported = false;
  for (const auto& f : r["features"]) {
    hc_supported = hc_supported || (f["name"] == "hyper-connections" && f["status"] == "supported by adapter");
    if (f["status"] == "supported by block") EXPECT_FALSE(f["proof"].get<std::string>().empty()) << f.dump();
  }
  EXPECT_TRUE(hc_supported) << r["features"].dump();
  const fs::path d = scratch_dir("inspect_modeling_register");
  const fs::path reg = d / "register.yaml";
  fs::remove(reg);
  const Outcome o = run_dayzero("inspect " + fixture_dir("DeepSeek-V4-Flash") + " --modeling " + modeling +
                                " --register " + reg.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const YAML::Node e = load_yaml(reg)[0];
  ASSERT_TRUE(e["unmatched"] && e["unmatched"].IsSequence());
  bool line = false;
  for (const auto& u : e["unmatched"]) line = line || u.as<std::string>() == "modeling_deepseek_v4.py:884 DeepseekV4HyperConnection";
  EXPECT_TRUE(line);
  EXPECT_FALSE(e["keys"]["unrecognised"] && e["keys"]["unrecognised"]["scoring_func"]);
  // A --modeling path that is not there is bad input naming it.
  const Outcome bad = run_dayzero("inspect " + fixture_dir("DeepSeek-V4-Flash") + " --modeling " + modeling + "_absent");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("deepseek_v4_absent"), std::string::npos) << bad.output;
}

TEST(InspectCli, RegisterTwoModelsTwiceKeepsTwoEntries) {
  const fs::path reg = scratch_dir("inspect_register") / "models.yaml";
  // A hand-written entry of another model, kept as it is.
  write_file(reg, "- {name: hand-written, owner: team-a, tags: [kept]}\n");
  for (const std::string m : {"GLM-5", "Qwen3-30B-A3B"}) {
    const Outcome o = run_dayzero("inspect " + fixture_dir(m) + " --register " + reg.string());
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find(m + " added"), std::string::npos) << o.output;
  }
  YAML::Node first = load_yaml(reg);
  ASSERT_TRUE(first.IsSequence());
  ASSERT_EQ(first.size(), 3u);
  const std::string hash = first[1]["config_hash"].as<std::string>();
  EXPECT_EQ(first[1]["name"].as<std::string>(), "GLM-5");
  EXPECT_EQ(first[2]["name"].as<std::string>(), "Qwen3-30B-A3B");
  // Backdate the GLM-5 entry so the second run's date is seen to change.
  const std::string old_date = first[1]["date"].as<std::string>();
  std::string text = read_file(reg);
  const size_t at = text.find("date: " + old_date);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 6 + old_date.size(), "date: 2000-01-01T00:00:00Z");
  write_file(reg, text);
  for (const std::string m : {"GLM-5", "Qwen3-30B-A3B"}) {
    const Outcome o = run_dayzero("inspect " + fixture_dir(m) + "/config.json --json --register " + reg.string());
    ASSERT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find(m + " updated (same name and config hash)"), std::string::npos) << o.output;
  }
  const YAML::Node second = load_yaml(reg);
  ASSERT_EQ(second.size(), 3u);
  EXPECT_EQ(YAML::Dump(second[0]), YAML::Dump(first[0]));
  EXPECT_EQ(second[0]["owner"].as<std::string>(), "team-a");
  EXPECT_EQ(second[1]["name"].as<std::string>(), "GLM-5");
  EXPECT_EQ(second[1]["config_hash"].as<std::string>(), hash);
  EXPECT_NE(second[1]["date"].as<std::string>(), "2000-01-01T00:00:00Z");
  EXPECT_EQ(second[2]["name"].as<std::string>(), "Qwen3-30B-A3B");
  EXPECT_GT(second[2]["parameters"]["total"].as<int64_t>(), 30000000000);
  EXPECT_EQ(second[2]["adapter"].as<std::string>(), "qwen3_moe");
}

// Kimi-K2.5 and Qwen3.5 have adapters now (kimi_k25, qwen3_5_moe): their configs come renamed to
// families no adapter claims, in folders of the published names (the entry's name).
TEST(InspectCli, MarkdownNamesEveryFeatureThatNeedsANewBlock) {
  const fs::path root = scratch_dir("inspect_markdown_renamed");
  const std::pair<std::string, std::string> models[] = {{"Kimi-K2.5", "moonvit_mla_preview"},
                                                        {"Qwen3.5-397B-A17B", "hybrid_linear_preview"}};
  for (const auto& [m, renamed] : models) {
    std::ifstream published(fixture_config(m));
    nlohmann::json c = nlohmann::json::parse(published);
    c["model_type"] = renamed;
    c["architectures"] = {renamed + "ForConditionalGeneration"};
    fs::create_directories(root / m);
    std::ofstream(root / m / "config.json") << c.dump();
    const std::string dir = (root / m).string();
    const Outcome j = run_dayzero("inspect --json " + dir);
    ASSERT_EQ(j.exit_code, 0) << j.output;
    const nlohmann::json r = parse_json(j);
    ASSERT_FALSE(r.contains("analysis")) << m << ": an adapter claims " << renamed;
    const Outcome md = run_dayzero("inspect --markdown " + dir);
    ASSERT_EQ(md.exit_code, 0) << md.output;
    EXPECT_NE(md.output.find("## " + m + "\n"), std::string::npos) << md.output;
    int missing = 0;
    for (const auto& f : r["features"])
      if (f["status"] == "needs a new block") {
        ++missing;
        EXPECT_NE(md.output.find("| " + f["name"].get<std::string>() + " | needs a new block |"), std::string::npos)
            << f["name"] << "\n" << md.output;
      }
    EXPECT_GT(missing, 0) << m;
  }
}

TEST(InspectCli, MalformedRegisterIsRefusedAndLeftUnchanged) {
  const fs::path d = scratch_dir("inspect_register_bad");
  for (const std::string text : {"name: GLM-5\nnot: a sequence\n", "- [unclosed\n", "- 42\n"}) {
    const fs::path reg = d / "models.yaml";
    write_file(reg, text);
    const Outcome o = run_dayzero("inspect " + fixture_dir("GLM-5") + " --register " + reg.string());
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find(reg.string()), std::string::npos) << o.output;
    EXPECT_EQ(read_file(reg), text);
    EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a temp file was left";
  }
}

}  // namespace
}  // namespace dayzero::e2e
