// `dayzero plan` end to end on config.json files: exit 2 with the shortfall when nothing fits,
// exit 0 with a plan.json that reads back and a report, bad flags. Skips when the dayzero
// binary (DAYZERO_BIN, set by ctest) is not built.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "plan/plan.h"

namespace dayzero::plan {
namespace {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr
};

CliRun run(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(std::getenv("DAYZERO_BIN")) + " plan " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("DAYZERO_BIN");
    if (!bin || access(bin, X_OK) != 0) GTEST_SKIP() << "dayzero binary not built";
    dir_ = std::filesystem::temp_directory_path() / ("dz_plan_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  const std::string llama405b_ =
      std::string(DAYZERO_SHARED_DIR) + "/fixtures/configs/Meta-Llama-3.1-405B/config.json";
};

TEST_F(PlanCli, NothingFitsOnOneNode) {
  const CliRun r = run("--config " + llama405b_ + " --nodes 1 --gpus-per-node 8 --gpu-mem 80GiB");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("no plan fits: best candidate dp=1 pp=1 tp=8 needs "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(short by "), std::string::npos) << r.out;
}

TEST_F(PlanCli, TwoNodesWritesPlanAndReport) {
  const std::string json = (dir_ / "plan.json").string(), html = (dir_ / "plan.html").string();
  const CliRun r = run("--config " + llama405b_ + " --nodes 2 --gpus-per-node 8 --gpu-mem 80GiB --out " + json +
                    " --report " + html);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("plan        dp=1 pp=2 tp=8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rejected: a tp group of 16 does not fit on a node of 8 GPUs"), std::string::npos) << r.out;
  std::ifstream f(json);
  auto p = plan_from_json(nlohmann::json::parse(f));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->world_size, 16);
  EXPECT_EQ(p->stages.back().layer_end, 126);
  std::ifstream h(html);
  std::stringstream ss;
  ss << h.rdbuf();
  EXPECT_NE(ss.str().find("<svg"), std::string::npos);
}

// A family without an adapter plans from the generic analysis, with its caveats next to the
// figures in the table, in plan.json and in the report: GLM-5's config renamed to a family no
// adapter claims (glm_moe_dsa has one).
TEST_F(PlanCli, UnknownFamilyPlansFromTheGenericAnalysis) {
  const std::string json = (dir_ / "glm.json").string(), html = (dir_ / "glm.html").string();
  std::ifstream published(std::string(DAYZERO_SHARED_DIR) + "/fixtures/configs/GLM-5/config.json");
  nlohmann::json c = nlohmann::json::parse(published);
  c["model_type"] = "sparse_mla_preview";
  c["architectures"] = {"SparseMlaPreviewForCausalLM"};
  std::ofstream(dir_ / "config.json") << c.dump();
  const CliRun r = run("--config " + (dir_ / "config.json").string() +
                       " --nodes 16 --gpus-per-node 8 --gpu-mem 80GiB --out " + json + " --report " + html);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("generic analysis of sparse_mla_preview (no adapter; config estimate)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cache 109824 KV bytes per token (78 layers)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights* kv*"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("* kv_cache    MLA: the latent kv_lora_rank 512"), std::string::npos) << r.out;
  std::ifstream f(json);
  auto p = plan_from_json(nlohmann::json::parse(f));
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_FALSE(p->caveats.empty());
  std::ifstream h(html);
  std::stringstream ss;
  ss << h.rdbuf();
  EXPECT_NE(ss.str().find("sparse-attention indexer's key"), std::string::npos);
}

TEST_F(PlanCli, BadInput) {
  CliRun r = run("--config " + llama405b_ + " --nodes 2 --gpus-per-node 8 --gpu-mem 80GiB --tp 3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("parallel.tp=3: 128 attention heads are not divisible by 3"), std::string::npos) << r.out;
  r = run("--config " + llama405b_ + " --nodes 2 --gpus-per-node 8");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--gpu-mem"), std::string::npos) << r.out;
  r = run("--config " + llama405b_ + " --gpu-mem lots");
  EXPECT_EQ(r.rc, 2);
  r = run("--nodes 1 --gpu-mem 80GiB");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("give --model DIR or --config"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dayzero::plan
