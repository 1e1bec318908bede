// The CUDA backend end to end (label gpu; skips where no device is visible): a tiny model of
// every family run on CUDA in bfloat16 against the CPU float32 reference through
// `dayzero compare --tolerance bf16`, and in float32 through `--tolerance f32`; tp2 and pp2
// with comm: mpi on one GPU (device buffers staged through host memory) against the 1-rank
// CUDA run; the choice of backend and comm in the dump ("none (one rank)" for one rank); the device peak within the plan; FP8
// kept as stored; the device's weight bytes equal to the plan's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

bool gpu_visible(std::string* why) {
  if (!backend::cuda_built()) return *why = "this dayzero was built without CUDA", false;
  auto n = backend::cuda_device_count();
  if (!n.ok()) return *why = n.status().message(), false;
  if (*n == 0) return *why = "no CUDA device is visible", false;
  return true;
}

#define SKIP_WITHOUT_GPU()                    \
  do {                                        \
    std::string why_;                         \
    if (!gpu_visible(&why_)) GTEST_SKIP() << why_; \
  } while (0)

std::string run_config(const fs::path& model, const std::string& backend, const std::string& dtype,
                       const std::string& extra) {
  return "model: {path: " + model.string() + ", dtype: " + dtype + "}\n" + "backend: " + backend + "\n" + extra +
         "prompts:\n"
         "  - {id: capital, text: \"The capital of France is\"}\n"
         "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n"
         "generate: {max_new_tokens: 4, stop_at_eos: false, top_k_record: 5}\n"
         "dump:\n"
         "  dir: unused-overridden-by-dump-dir\n"
         "  activations: {layers: all, phase: both, mode: full}\n";
}

// Runs a config (under mpiexec when ranks > 1) into dir/<name>; returns the run folder.
fs::path run(const fs::path& dir, const std::string& name, const std::string& cfg, int ranks = 1) {
  write_file(dir / (name + ".yaml"), cfg);
  const std::string args = "run " + (dir / (name + ".yaml")).string() + " --dump-dir " + (dir / name).string();
  const Outcome o = ranks > 1 ? run_dayzero_mpi(ranks, args) : run_dayzero(args);
  EXPECT_EQ(o.exit_code, 0) << name << ":\n" << o.output;
  return dir / name;
}

void expect_compare_passes(const fs::path& a, const fs::path& b, const std::string& tolerance) {
  const Outcome o = run_dayzero("compare " + a.string() + " " + b.string() + " --tolerance " + tolerance);
  EXPECT_EQ(o.exit_code, 0) << "compare " << a << " " << b << " --tolerance " << tolerance << ":\n" << o.output;
}

nlohmann::json summary_of(const fs::path& run_dir, int rank = 0) {
  auto r = dump::DumpReader::open(rank_dump(run_dir, rank).string());
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  auto s = r->attr_string("summary");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? nlohmann::json::parse(*s) : nlohmann::json{};
}

class CudaFamilies : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaFamilies, MatchesTheCpuReference) {
  SKIP_WITHOUT_GPU();
  const std::string family = GetParam();
  const bool fp8 = family == "deepseek_v3_fp8";
  const fs::path dir = scratch_dir("cuda-e2e-" + family);
  make_model_from_yaml(golden_sizes(family), dir / "model", fp8 ? "" : "--dtype float32");
  const fs::path cpu = run(dir, "cpu", run_config(dir / "model", "cpu", "float32", ""));
  // Weights converted to bf16 on the device, so that the bf16 GEMMs run (an f32 checkpoint kept
  // as stored would compute in f32); float32: every weight in f32, FP8 dequantised on the host.
  std::string bf16_cfg = run_config(dir / "model", "cuda", "bfloat16, weights_on_device: bfloat16", "");
  std::string f32_cfg = run_config(dir / "model", "cuda", "float32, weights_on_device: float32", "");
  const fs::path bf16 = run(dir, "cuda-bf16", bf16_cfg);
  const fs::path f32 = run(dir, "cuda-f32", f32_cfg);
  expect_compare_passes(cpu, bf16, "bf16");
  expect_compare_passes(cpu, f32, "f32");
  if (fp8) {
    // FP8 kept as stored, dequantised per GEMM on the device: in f32 compute the values the GEMM
    // sees are the host dequantisation's exactly (one f32 multiply), in bf16 their rounding.
    const fs::path s16 = run(dir, "cuda-fp8-bf16", run_config(dir / "model", "cuda", "bfloat16", ""));
    const fs::path s32 = run(dir, "cuda-fp8-f32", run_config(dir / "model", "cuda", "float32", ""));
    expect_compare_passes(cpu, s16, "bf16");
    expect_compare_passes(cpu, s32, "f32");
  }
  // The choice is recorded, and the device peak stays within the plan's bytes for the rank.
  const nlohmann::json s = summary_of(bf16);
  EXPECT_EQ(s.value("backend", ""), "cuda") << s.dump();
  // One rank: every group is a group of one, so no comm moves device tensors.
  EXPECT_EQ(s.value("comm", ""), "none (one rank)") << s.dump();
  const nlohmann::json plan = nlohmann::json::parse(read_file(bf16 / "plan.json"));
  const nlohmann::json& m = plan.at("memory").at(0);
  const int64_t planned = m.at("weights").get<int64_t>() + m.at("kv_cache").get<int64_t>() +
                          m.at("activations").get<int64_t>() + m.at("headroom").get<int64_t>();
  EXPECT_GT(s.value("peak_memory_bytes", int64_t{0}), 0);
  EXPECT_LE(s.value("peak_memory_bytes", int64_t{0}), planned) << s.dump() << "\n" << m.dump();
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaFamilies,
                         ::testing::Values("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3",
                                           "deepseek_v3_fp8", "deepseek_v32", "llava"),
                         [](const auto& info) { return std::string(info.param); });

// The device's weight allocation (memory_info().weight_bytes, recorded in the summary) equals
// the plan's per-rank weights, for a bf16 llama and a block-FP8 deepseek_v3 kept as stored, on
// one rank and on each rank of tp2 (comm: mpi, one GPU); and the peak is reached at the start:
// at least weights + KV cache + state + activations of the plan (pre-sized before the first
// prompt), at most the plan's total with its headroom.
TEST(CudaPlanBytes, DeviceWeightsEqualThePlan) {
  SKIP_WITHOUT_GPU();
  for (const char* family : {"llama", "deepseek_v3_fp8"}) {
    const bool fp8 = std::string(family) == "deepseek_v3_fp8";
    const fs::path dir = scratch_dir(std::string("cuda-e2e-bytes-") + family);
    make_model_from_yaml(golden_sizes(family), dir / "model", fp8 ? "" : "--dtype bfloat16");
    for (int ranks : {1, 2}) {
      const std::string extra = ranks == 2 ? "comm: mpi\nparallel: {tp: 2}\n" : "";
      const std::string name = std::string(family) + "-" + std::to_string(ranks);
      const fs::path r = run(dir, name, run_config(dir / "model", "cuda", "bfloat16", extra), ranks);
      const nlohmann::json plan = nlohmann::json::parse(read_file(r / "plan.json"));
      for (int rank = 0; rank < ranks; ++rank) {
        const nlohmann::json s = summary_of(r, rank);
        EXPECT_EQ(s.value("comm", ""), ranks == 1 ? "none (one rank)" : "mpi (device buffers staged through host memory)")
            << name << " rank " << rank;
        const nlohmann::json& m = plan.at("memory").at(rank);
        const int64_t weights = m.at("weights").get<int64_t>();
        EXPECT_GT(weights, 0) << name;
        EXPECT_EQ(s.value("weight_bytes", int64_t{-1}), weights) << name << " rank " << rank << ": " << s.dump();
        const int64_t presized = weights + m.at("kv_cache").get<int64_t>() + m.value("state", int64_t{0}) +
                                 m.at("activations").get<int64_t>();
        const int64_t peak = s.value("peak_memory_bytes", int64_t{0});
        EXPECT_GE(peak, presized) << name << " rank " << rank << ": " << s.dump() << "\n" << m.dump();
        EXPECT_LE(peak, presized + m.at("headroom").get<int64_t>()) << name << " rank " << rank;
      }
    }
  }
}

// tp2 and pp2 with comm: mpi on one GPU (two ranks share it, buffers staged through the host)
// against the 1-rank CUDA run, both float32 compute.
TEST(CudaPlans, Tp2AndPp2WithMpiOnOneGpu) {
  SKIP_WITHOUT_GPU();
  const fs::path dir = scratch_dir("cuda-e2e-plans");
  make_model_from_yaml(golden_sizes("qwen3"), dir / "model", "--dtype float32");
  const fs::path one = run(dir, "one", run_config(dir / "model", "cuda", "float32", "comm: mpi\n"));
  const fs::path tp2 = run(dir, "tp2", run_config(dir / "model", "cuda", "float32", "comm: mpi\nparallel: {tp: 2}\n"), 2);
  const fs::path pp2 = run(dir, "pp2", run_config(dir / "model", "cuda", "float32", "comm: mpi\nparallel: {pp: 2}\n"), 2);
  expect_compare_passes(one, tp2, "f32");
  expect_compare_passes(one, pp2, "f32");
}

}  // namespace
}  // namespace dayzero::e2e
