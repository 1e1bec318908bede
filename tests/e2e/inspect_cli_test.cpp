// dayzero inspect: a bare config.json (--json, parsed back), a folder holding only config.json,
// a generated checkpoint (figures plus the tensor check), an unknown architecture (the generic
// analysis, exit 0) and an unknown architecture whose config lacks its sizes (exit 2).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

std::string fixture_config(const std::string& name) {
  return std::string(DAYZERO_SHARED_DIR) + "/fixtures/configs/" + name + "/config.json";
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

TEST(InspectCli, UnknownArchitectureGetsTheGenericAnalysis) {
  const Outcome o = run_dayzero("inspect " + fixture_config("llava-1.5-7b-hf"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("unknown architecture"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("vision tower"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("needs a new block"), std::string::npos) << o.output;
  const Outcome j = run_dayzero("inspect --json " + fixture_config("GLM-5"));
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json r = parse_json(j);
  EXPECT_EQ(r["source"], "config estimate");
  bool dsa = false;
  for (const auto& f : r["features"]) dsa = dsa || (f["name"] == "sparse attention indexer (DSA)" && f["status"] == "needs a new block");
  EXPECT_TRUE(dsa) << r["features"].dump();
}

TEST(InspectCli, UnknownArchitectureWithoutSizesIsBadInput) {
  const std::string path = ::testing::TempDir() + "dayzero-inspect-nosizes.json";
  std::ofstream(path) << R"({"model_type": "brand_new", "hidden_size": "wide"})";
  const Outcome o = run_dayzero("inspect " + path);
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("hidden_size"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace dayzero::e2e
