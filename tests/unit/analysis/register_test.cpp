// The model register (analysis/register.h): entries of two fixture models written and loaded
// back give the same entries; the update rule (name + config hash, else name) replaces in place
// and keeps other entries; a file that is not a sequence of named maps is refused unchanged;
// the Markdown page names every feature that needs a new block.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/register.h"

namespace dayzero::analysis {
namespace {
namespace fs = std::filesystem;

const std::string kConfigs = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";

YAML::Node entry_of(const std::string& model, const std::string& date) {
  auto a = analyze_path(kConfigs + model);
  EXPECT_TRUE(a.ok()) << a.status().message();
  auto id = identify_model(kConfigs + model);
  EXPECT_TRUE(id.ok()) << id.status().message();
  return register_entry(*a, *id, date);
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string temp(const std::string& name) {
  const std::string p = ::testing::TempDir() + "dayzero-register-" + name;
  fs::remove(p);
  return p;
}

TEST(Register, WriteLoadRoundTrip) {
  const std::string path = temp("roundtrip.yaml");
  const std::vector<YAML::Node> entries = {entry_of("GLM-5", "2026-01-01T00:00:00Z"),
                                           entry_of("Qwen3-30B-A3B", "2026-01-02T00:00:00Z")};
  ASSERT_TRUE(write_register(path, entries).ok());
  auto loaded = load_register(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(YAML::Dump((*loaded)[i]), YAML::Dump(entries[i])) << i;
  auto a = analyze_path(kConfigs + "GLM-5");
  ASSERT_TRUE(a.ok());
  const YAML::Node& g = (*loaded)[0];
  EXPECT_EQ(g["name"].as<std::string>(), "GLM-5");
  EXPECT_EQ(g["parameters"]["total"].as<int64_t>(), a->total);
  EXPECT_EQ(g["parameters"]["activated"].as<int64_t>(), a->activated);
  EXPECT_EQ(g["memory_bytes"]["bf16"].as<int64_t>(), 2 * a->total);
  EXPECT_EQ(g["memory_bytes"]["fp8"].as<int64_t>(), a->total);
  EXPECT_EQ(g["memory_bytes"]["f32"].as<int64_t>(), 4 * a->total);
  EXPECT_EQ(g["structure"]["attention"].as<std::string>(), "MLA + sparse indexer (DSA)");
  EXPECT_EQ(g["features"].size(), a->features.size());
  EXPECT_EQ(g["config_hash"].as<std::string>().rfind("xxh64:", 0), 0u);
  EXPECT_EQ(g["config_hash"].as<std::string>().size(), 6u + 16u);
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Register, UpsertByHashThenByNameKeepsOthers) {
  YAML::Node other = YAML::Load("{name: hand-written, owner: team-a, notes: [kept]}");
  std::vector<YAML::Node> entries = {entry_of("GLM-5", "old"), other};
  const std::string other_before = YAML::Dump(other);
  EXPECT_EQ(upsert_entry(entries, entry_of("GLM-5", "new")), Upsert::kSameHash);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["date"].as<std::string>(), "new");
  EXPECT_EQ(YAML::Dump(entries[1]), other_before);
  YAML::Node changed = entry_of("GLM-5", "newer");
  changed["config_hash"] = "xxh64:0000000000000000";
  EXPECT_EQ(upsert_entry(entries, changed), Upsert::kByName);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["config_hash"].as<std::string>(), "xxh64:0000000000000000");
  EXPECT_EQ(upsert_entry(entries, entry_of("Qwen3-30B-A3B", "x")), Upsert::kAdded);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(YAML::Dump(entries[1]), other_before);
}

TEST(Register, MalformedFilesAreRefused) {
  const std::string path = temp("bad.yaml");
  for (const std::string text : {"name: not-a-sequence\n", "- [unclosed\n", "- just a string\n", "- {owner: x}\n"}) {
    std::ofstream(path) << text;
    auto r = load_register(path);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().exit_code(), 2) << text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_EQ(slurp(path), text);
  }
  std::ofstream(path) << "";
  auto empty = load_register(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto absent = load_register(temp("absent.yaml"));
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->empty());
}

// Kimi-K2.5 and Qwen3.5 have adapters now (kimi_k25, qwen3_5_moe): their configs come renamed to
// families no adapter claims, in folders of the published names (the entry's name).
TEST(Register, MarkdownNamesEveryFeatureThatNeedsANewBlock) {
  const fs::path root = ::testing::TempDir() + "dayzero-register-renamed";
  fs::remove_all(root);
  const std::pair<std::string, std::string> models[] = {{"Kimi-K2.5", "moonvit_mla_preview"},
                                                        {"Qwen3.5-397B-A17B", "hybrid_linear_preview"}};
  for (const auto& [model, renamed] : models) {
    std::ifstream published(kConfigs + model + "/config.json");
    nlohmann::json c = nlohmann::json::parse(published);
    c["model_type"] = renamed;
    c["architectures"] = {renamed + "ForConditionalGeneration"};
    const fs::path dir = root / model;
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << c.dump();
    auto a = analyze_path(dir.string());
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(a->adapter.empty()) << model << ": " << a->adapter;
    auto id = identify_model(dir.string());
    ASSERT_TRUE(id.ok()) << id.status().message();
    std::ostringstream o;
    print_markdown(o, {register_entry(*a, *id, "d")});
    const std::string page = o.str();
    EXPECT_NE(page.find("## " + model + "\n"), std::string::npos) << page;
    const size_t unsupported = page.find("Unsupported: ");
    ASSERT_NE(unsupported, std::string::npos) << page;
    const std::string line = page.substr(unsupported, page.find('\n', unsupported) - unsupported);
    int missing = 0;
    for (const auto& f : a->features)
      if (f.status == FeatureStatus::kNewBlock) {
        ++missing;
        EXPECT_NE(page.find("| " + f.name + " | needs a new block |"), std::string::npos) << f.name << "\n" << page;
        EXPECT_NE(line.find(f.name), std::string::npos) << f.name << "\n" << line;
      }
    EXPECT_GT(missing, 0) << model;
  }
}

TEST(Register, IdentityNamesTheFolder) {
  auto dir = identify_model(kConfigs + "GLM-5");
  auto file = identify_model(kConfigs + "GLM-5/config.json");
  ASSERT_TRUE(dir.ok() && file.ok());
  EXPECT_EQ(dir->name, "GLM-5");
  EXPECT_EQ(file->name, "GLM-5");
  EXPECT_EQ(dir->config_hash, file->config_hash);
  auto other = identify_model(kConfigs + "GLM-5-missing");
  EXPECT_FALSE(other.ok());
}

}  // namespace
}  // namespace dayzero::analysis
