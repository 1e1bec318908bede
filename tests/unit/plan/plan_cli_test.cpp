// `dayzero plan` end to end on config.json files: exit 2 with the shortfall when nothing fits,
// exit 0 with a plan.json that reads back and a report, bad flags, where the vision tower of
// Kimi-K2.5 and llava-1.5 runs and the bytes it holds per rank. Skips when the dayzero
// binary (DAYZERO_BIN, set by ctest) is not built.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

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
      std::string(DAYZERO_FIXTURES_DIR) + "/configs/Meta-Llama-3.1-405B/config.json";
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

// The tower and projector of a multimodal model: replicated on the first stage, their bytes
// per rank (as stored) in the output and in plan.json, with the tp split they would be, and
// plan.json reading them back. Expected bytes from the published shapes, counted here:
// Kimi-K2.5's MoonViT (27 layers of 1152, ffn 4304, patch conv with bias, 64x64x1152 table,
// final LayerNorm) and patchmerger; llava-1.5's CLIP-L/14-336 with only the 23 layers its
// vision_feature_layer -2 runs (the 24th and post_layernorm are not held) and its 2-layer MLP.
// A text-only model has no vision entry.
TEST_F(PlanCli, VisionTowerPlacementAndBytes) {
  const std::string fixtures = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";
  struct Case {
    const char* model;
    const char* flags;
    int tp;
    int64_t tower_params, projector_params, layers, width;
    const char* line;
  };
  auto vit = [](int64_t d, int64_t ff, int64_t layers, int64_t patch_params, int64_t extra) {
    const int64_t layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (ff * d + ff) + (d * ff + d);
    return patch_params + extra + layers * layer;
  };
  const Case cases[] = {
      {"Kimi-K2.5", "--nodes 2 --gpus-per-node 8 --gpu-mem 80GiB", 8,
       vit(1152, 4304, 27, 1152 * 3 * 14 * 14 + 1152, 64 * 64 * 1152 + 2 * 1152),
       int64_t{1152} * 2 + 4608 * 4608 + 4608 + 7168 * 4608 + 7168, 27, 1152,
       "vision      tower 795.1 MiB + projector 103.5 MiB per rank of pp0\n"},
      {"llava-1.5-7b-hf", "--nodes 1 --gpus-per-node 2 --gpu-mem 80GiB --tp 2", 2,
       vit(1024, 4096, 23, 1024 * 3 * 14 * 14, 1024 + 577 * 1024 + 2 * 1024),
       int64_t{4096} * 1024 + 4096 + 4096 * 4096 + 4096, 23, 1024,
       "vision      tower 554.9 MiB + projector 40.0 MiB per rank of pp0\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    const std::string json = (dir_ / (std::string(c.model) + ".json")).string();
    const CliRun r = run("--config " + fixtures + c.model + "/config.json " + c.flags + " --out " + json);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(c.line), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("            replicated on stage pp0 before its decoder layers, each of its " +
                         std::to_string(c.tp) + " tp rank(s) holding tower and projector whole"),
              std::string::npos)
        << r.out;
    std::ifstream f(json);
    auto p = plan_from_json(nlohmann::json::parse(f));
    ASSERT_TRUE(p.ok()) << p.status().message();
    ASSERT_EQ(p->tp, c.tp);
    const VisionPlacement& v = p->vision;
    ASSERT_TRUE(v.present);
    EXPECT_EQ(v.placement, "replicated");
    EXPECT_EQ(v.stage, 0);
    EXPECT_EQ(v.tower_bytes, 2 * c.tower_params);  // bf16 / fp16 as stored
    EXPECT_EQ(v.projector_bytes, 2 * c.projector_params);
    EXPECT_EQ(v.split_bytes, (v.tower_bytes + v.projector_bytes) / c.tp);
    EXPECT_EQ(v.split_all_reduce_bytes_per_patch, 2 * c.layers * c.width * 2);  // 2 per layer, bf16 activations
    EXPECT_LE(v.tower_bytes + v.projector_bytes, p->memory[0].weights);  // counted in the first stage's weights
  }
  const std::string json = (dir_ / "text.json").string();
  const CliRun r = run("--config " + llama405b_ + " --nodes 2 --gpus-per-node 8 --gpu-mem 80GiB --out " + json);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("\nvision "), std::string::npos) << r.out;
  std::ifstream f(json);
  const auto j = nlohmann::json::parse(f);
  EXPECT_FALSE(j.contains("vision"));
  auto p = plan_from_json(j);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->vision.present);
}

// A family without an adapter plans from the generic analysis, with its caveats next to the
// figures in the table, in plan.json and in the report: GLM-5's config renamed to a family no
// adapter claims (glm_moe_dsa has one).
TEST_F(PlanCli, UnknownFamilyPlansFromTheGenericAnalysis) {
  const std::string json = (dir_ / "glm.json").string(), html = (dir_ / "glm.html").string();
  std::ifstream published(std::string(DAYZERO_FIXTURES_DIR) + "/configs/GLM-5/config.json");
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

// DeepSeek-V4-Pro (1.6T) as released: FP8 Linears with UE8M0 128x128 block scales (counted at
// 4 B, as a rank holds them) and MXFP4 routed experts (0.5 B + a UE8M0 byte per 32), at a
// 65,536-token context: dp2 x tp8 on two nodes of 8 H200 (a replica per node) and dp2 x pp2 x
// tp8 on four of 8 H100, every rank under the cap, the ranks holding two copies of the model
// between them (1,747.8 GB measured: 873.9 GB a replica). The control: in bf16 (3.2 TB)
// nothing fits on the H200 nodes.
TEST_F(PlanCli, DeepseekV4ProOnTwoH200NodesAndFourH100Nodes) {
  std::ifstream in(std::string(DAYZERO_FIXTURES_DIR) + "/configs/DeepSeek-V4-Pro/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  const std::string bf16 = (dir_ / "v4pro-bf16.json").string(), fp8 = (dir_ / "v4pro-fp8.json").string();
  std::ofstream(bf16) << c.dump();
  c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}, {"expert_dtype", "fp4"}};
  std::ofstream(fp8) << c.dump();
  struct Case {
    int nodes;
    const char* mem;
    double cap_gib;
    const char* plan;
  };
  for (const Case& k : {Case{2, "141GiB", 141 * 0.9, "plan        dp=2 pp=1 tp=8"},
                        Case{4, "80GiB", 80 * 0.9, "plan        dp=2 pp=2 tp=8"}}) {
    const std::string out = (dir_ / ("v4pro-" + std::to_string(k.nodes) + ".json")).string();
    const CliRun r = run("--config " + fp8 + " --nodes " + std::to_string(k.nodes) + " --gpus-per-node 8 --gpu-mem " +
                         k.mem + " --context 65536 --out " + out);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(k.plan), std::string::npos) << r.out;
    std::ifstream f(out);
    const nlohmann::json p = nlohmann::json::parse(f);
    ASSERT_EQ(p["memory"].size(), static_cast<size_t>(8 * k.nodes));
    double weights = 0, worst = 0;
    for (const auto& m : p["memory"]) {
      weights += m["weights"].get<double>();
      worst = std::max(worst, m["total"].get<double>());
    }
    EXPECT_LT(worst, k.cap_gib * (1 << 30)) << r.out;
    EXPECT_NEAR(weights / 1e9, 1747.8, 1.0) << r.out;
    std::printf("V4-Pro FP8 + MXFP4 on %d x 8 (%s): %s, weights %.1f GB over the ranks, the fullest rank %.1f GiB\n", k.nodes,
                k.mem, k.plan + 12, weights / 1e9, worst / (1 << 30));
  }
  const CliRun none = run("--config " + bf16 + " --nodes 2 --gpus-per-node 8 --gpu-mem 141GiB --context 65536");
  EXPECT_EQ(none.rc, 2) << none.out;
  EXPECT_NE(none.out.find("no plan fits"), std::string::npos) << none.out;
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
