// `dayzero plan` and `dayzero run` choose the same plan for the same inputs: a tiny FP8
// deepseek_v3 (MLA, MoE; F8 Linears, F32 scales, BF16 rest: the first tensor's dtype is not the
// bulk's) under a run with its topology given and no fixed sizes, and `plan --model` with the
// equivalent flags. The memory budget is set between the best one-replica plan and dp=2, so the
// choice depends on the weights, KV cache (batch x context) and activations counted. Not a test
// of the planner's choices themselves (tests/unit/plan).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cinttypes>
#include <cstdio>

#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

// Prompts of 5, 3 and 2 token ids, 4 new tokens, max_batch 2: the run must count 2 resident
// sequences of 5 + 4 = 9 positions.
constexpr int kContext = 9;
constexpr int kBatch = 2;

int64_t max_total(const json& plan) {
  int64_t m = 0;
  for (const auto& r : plan["memory"]) m = std::max(m, r["total"].get<int64_t>());
  return m;
}

json plan_json(const fs::path& model, const fs::path& out, const std::string& gpu_mem, const std::string& extra) {
  const Outcome o = run_dayzero("plan --model " + model.string() + " --nodes 1 --gpus-per-node 2 --gpu-mem " + gpu_mem +
                                " --memory-fraction 1 --compute-dtype float32 --backend cpu --context " + std::to_string(kContext) +
                                " --out " + out.string() + " " + extra);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  return o.exit_code == 0 ? json::parse(read_file(out)) : json();
}

TEST(PlanRunAgreement, SamePlanForTheSameInputs) {
  const fs::path dir = scratch_dir("plan_run_agreement");
  const fs::path model = dir / "model";
  make_model_from_yaml(golden_sizes("deepseek_v3"), model, "--dtype fp8");
  const std::string batch = " --batch " + std::to_string(kBatch);

  // The budget: between the best dp=1 plan and dp=2 (each rank the whole model).
  const json dp2 = plan_json(model, dir / "dp2.json", "100GiB", "--dp 2" + batch);
  const json dp1 = plan_json(model, dir / "dp1.json", "100GiB", "--dp 1" + batch);
  ASSERT_FALSE(dp2.is_null());
  ASSERT_FALSE(dp1.is_null());
  ASSERT_LT(max_total(dp1), max_total(dp2));
  const int64_t budget = (max_total(dp1) + max_total(dp2)) / 2;
  char gib[64];
  std::snprintf(gib, sizeof gib, "%.17g", static_cast<double>(budget) / static_cast<double>(int64_t{1} << 30));

  write_file(dir / "run.yaml", "model: {path: " + model.string() + ", dtype: float32}\n"
             "topology: {nodes: 1, gpus_per_node: 2, device_memory_gib: " + std::string(gib) + ", memory_fraction: 1.0}\n"
             "prompts:\n"
             "  - {id: a, tokens: [3, 17, 42, 99, 5]}\n"
             "  - {id: b, tokens: [7, 8, 9]}\n"
             "  - {id: c, tokens: [11, 12]}\n"
             "generate: {max_new_tokens: 4, stop_at_eos: false, max_batch: " + std::to_string(kBatch) + "}\n"
             "dump: {dir: unused}\n");
  const Outcome r = run_dayzero_mpi(2, "run " + (dir / "run.yaml").string() + " --dump-dir " + (dir / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json ran = json::parse(read_file(dir / "run" / "plan.json"));

  const json planned = plan_json(model, dir / "plan.json", std::to_string(budget) + "B", batch);
  ASSERT_FALSE(planned.is_null());
  EXPECT_EQ(ran["dp"], 1) << "the budget leaves no room for two replicas: " << ran.dump();
  for (const char* key : {"world_size", "dp", "pp", "tp", "ep", "etp", "stages", "ranks", "memory", "memory_cap_bytes"})
    EXPECT_EQ(ran[key], planned[key]) << key << ": run " << ran[key].dump() << ", plan " << planned[key].dump();

  // The run counts the resident batch: the same sizes for one sequence hold half the KV cache.
  std::string fixed = "--batch 1";
  for (const char* key : {"dp", "pp", "tp", "ep", "etp"}) fixed += std::string(" --") + key + " " + ran[key].dump();
  const json one = plan_json(model, dir / "one.json", std::to_string(budget) + "B", fixed);
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(2 * one["memory"][0]["kv_cache"].get<int64_t>(), ran["memory"][0]["kv_cache"].get<int64_t>());
}

}  // namespace
}  // namespace dayzero::e2e
