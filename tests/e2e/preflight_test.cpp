// `dayzero preflight` on this host, two ranks: a consistent launch exits 0 and writes
// preflight.json in the documented schema (docs/preflight.md), with no GPU visible on the CPU's
// path (MPI on host buffers, the host-device copy test not run and why, NVML's fields unknown
// where the library is absent); ranks started with different
// values of a variable that matters (an MPMD launch) are named, exit 1, while a secret-looking
// value is never printed; with a run config the plan's tp all-reduce is tested and the
// checkpoint's shards read, and pp 2 / tp 2 x ep 2 plans get their send/recv and all-to-all; a stalled tp all-reduce (debug.stall) ends the job with exit 3
// naming the group; bad options and configs exit 2.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

// Small and fast: 8 MiB read, 1 MiB collectives. The fraction is low because these tests share
// two cores with whatever else runs (a GEMM of one rank can lose half its rate to a neighbour);
// outliers are tested on the namespace test bed (tests/multinode/preflight_multinode_test.cpp).
const std::string kSmall = " --read-mib 8 --collective-mib 1 --outlier-fraction 0.05 --timeout 30";
constexpr int kLimitS = 60;

std::string mpiexec() { return "timeout -k 5 " + std::to_string(kLimitS) + " mpiexec --oversubscribe "; }

const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("preflight-model");
    make_model_from_yaml(golden_sizes("llama"), d / "model", "--dtype float32");
    return d / "model";
  }();
  return dir;
}

fs::path write_config(const std::string& name, const std::string& extra) {
  const fs::path d = scratch_dir(name);
  write_file(d / "run.yaml", "model: {path: " + model_dir().string() + ", dtype: float32}\n" + extra +
                                 "prompts:\n  - {id: raw, tokens: [3, 17, 42]}\n"
                                 "generate: {max_new_tokens: 2}\n");
  return d / "run.yaml";
}

void expect_schema(const json& doc, int world) {
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.value("schema", ""), "dayzero.preflight/2");
  EXPECT_TRUE(doc["backend"]["name"].is_string());
  EXPECT_TRUE(doc["backend"]["reason"].is_string());
  EXPECT_TRUE(doc["comm"].is_string());
  ASSERT_TRUE(doc["not_run"].is_array());
  for (const json& n : doc["not_run"]) EXPECT_TRUE(n["name"].is_string() && n["reason"].is_string()) << n.dump();
  EXPECT_EQ(doc["world_size"], world);
  ASSERT_TRUE(doc["nodes"].is_array());
  ASSERT_TRUE(doc["outlier_fraction"].is_number());
  ASSERT_EQ(doc["ranks"].size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const json& i = doc["ranks"][r];
    EXPECT_EQ(i["rank"], r);
    for (const char* k : {"host", "cpu", "memory_bytes", "gpus", "versions", "env", "interfaces", "ib_devices",
                          "run_dir", "checkpoint", "clock_offset_ns"})
      EXPECT_TRUE(i.contains(k)) << "ranks[" << r << "] lacks " << k;
    EXPECT_TRUE(i["cpu"]["model"].is_string());
    EXPECT_TRUE(i["cpu"]["isa"].is_array());
    for (const char* v : {"mpi", "hdf5", "cuda_runtime", "nvidia_driver", "dayzero"})
      EXPECT_TRUE(i["versions"][v].is_string()) << v;
    EXPECT_TRUE(i["gpus"]["nvml"].is_string());
    EXPECT_TRUE(i["run_dir"]["free_bytes"].is_number());
  }
  ASSERT_TRUE(doc["mismatches"].is_array());
  ASSERT_TRUE(doc["tests"].is_array());
  for (const json& t : doc["tests"]) {
    for (const char* k : {"name", "what", "unit", "median", "figures"}) EXPECT_TRUE(t.contains(k)) << k;
    // Every communication test says what carried it.
    const std::string name = t["name"];
    if (name.find("all_reduce") != std::string::npos || name.find("send_recv") != std::string::npos ||
        name.find("all_to_all") != std::string::npos || name.rfind("pairwise", 0) == 0) {
      EXPECT_TRUE(t["transport"].is_string()) << name;
    }
    for (const json& f : t["figures"]) {
      EXPECT_TRUE(f["subject"].is_string());
      EXPECT_GT(f["value"].get<double>(), 0) << t["name"] << " " << f["subject"];
      EXPECT_TRUE(f["ratio"].is_number());
      EXPECT_TRUE(f["outlier"].is_boolean());
    }
  }
  ASSERT_TRUE(doc["outliers"].is_array());
  EXPECT_TRUE(doc["exit_code"].is_number_integer());
}

const json* find_test(const json& doc, const std::string& name) {
  for (const json& t : doc["tests"])
    if (t["name"] == name) return &t;
  return nullptr;
}

TEST(Preflight, ConsistentTwoRankLaunchExitsZeroAndWritesTheSchema) {
  const fs::path d = scratch_dir("preflight-ok");
  // No GPU visible, also where there is one: the CPU's path (a GPU's is cuda_preflight_test's).
  const Outcome o = run_shell("CUDA_VISIBLE_DEVICES= " + mpiexec() + "-x CUDA_VISIBLE_DEVICES -n 2 " + dayzero_bin() +
                              " preflight --dump-dir " + (d / "run").string() + kSmall);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("verdict      consistent (exit 0)"), std::string::npos) << o.output;
  const json doc = json::parse(read_file(d / "run" / "preflight.json"));
  expect_schema(doc, 2);
  EXPECT_EQ(doc["exit_code"], 0);
  EXPECT_TRUE(doc["mismatches"].empty()) << doc["mismatches"].dump(2);
  const json* gemm = find_test(doc, "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ((*gemm)["figures"].size(), 2u);
  const json* ar = find_test(doc, "world all_reduce");
  ASSERT_NE(ar, nullptr) << doc["tests"].dump(2);
  // The CPU's path: MPI on host buffers, and the copy test absent with its reason, not a figure.
  EXPECT_EQ(doc["backend"]["name"], "cpu");
  EXPECT_EQ(doc["comm"], "mpi");
  EXPECT_EQ((*ar)["transport"], "mpi (host buffers)");
  EXPECT_NE((*ar)["what"].get<std::string>().find("mpi (host buffers)"), std::string::npos);
  EXPECT_EQ(find_test(doc, "h2d copy"), nullptr);
  EXPECT_EQ(find_test(doc, "d2h copy"), nullptr);
  ASSERT_EQ(doc["not_run"].size(), 2u) << doc["not_run"].dump(2);
  EXPECT_EQ(doc["not_run"][0]["name"], "h2d copy");
  EXPECT_EQ(doc["not_run"][1]["name"], "d2h copy");
  const std::string why = doc["not_run"][0]["reason"];
  EXPECT_EQ(why.rfind("no GPU: backend cpu (", 0), 0u) << why;
  EXPECT_NE(o.output.find("  h2d copy: not run: " + why), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("backend      cpu ("), std::string::npos) << o.output;
  // Without libnvidia-ml (this process cannot open it either) NVML's fields say so.
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(nvml);
  } else {
    EXPECT_EQ(doc["ranks"][0]["versions"]["nvidia_driver"], "unknown (no NVML)");
    EXPECT_EQ(doc["ranks"][1]["gpus"]["nvml"], "unknown (no NVML)");
  }
  const json* rd = find_test(doc, "read");
  ASSERT_NE(rd, nullptr);
  EXPECT_NE((*rd)["what"].get<std::string>().find("scratch file"), std::string::npos);
  // The scratch file is gone.
  for (const auto& e : fs::directory_iterator(d / "run"))
    EXPECT_EQ(e.path().filename().string().find(".preflight-read"), std::string::npos) << e.path();
}

TEST(Preflight, MpmdLaunchWithADifferentVariableIsNamedAndSecretsStayHidden) {
  const fs::path d = scratch_dir("preflight-mpmd");
  const std::string args = " preflight --dump-dir " + (d / "run").string() + kSmall;
  const Outcome o = run_shell("NCCL_TEST_TOKEN=hunter2 " + mpiexec() + "-x NCCL_TEST_TOKEN -n 1 " + dayzero_bin() +
                              args + " : -n 1 -x NCCL_SOCKET_IFNAME=eth9 " + dayzero_bin() + args);
  ASSERT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("(rank 1): env.NCCL_SOCKET_IFNAME=eth9; the other 1 rank(s) on 1 node(s): (unset)"),
            std::string::npos)
      << o.output;
  const std::string text = read_file(d / "run" / "preflight.json");
  const json doc = json::parse(text);
  expect_schema(doc, 2);
  EXPECT_EQ(doc["exit_code"], 1);
  ASSERT_EQ(doc["mismatches"].size(), 1u) << doc["mismatches"].dump(2);
  EXPECT_EQ(doc["mismatches"][0]["field"], "env.NCCL_SOCKET_IFNAME");
  EXPECT_EQ(doc["ranks"][0]["env"]["NCCL_TEST_TOKEN"], "<redacted>");
  EXPECT_EQ(text.find("hunter2"), std::string::npos);
  EXPECT_EQ(o.output.find("hunter2"), std::string::npos);
}

TEST(Preflight, WithARunConfigThePlansTpAllReduceIsTestedAndTheShardsRead) {
  const fs::path cfg = write_config("preflight-tp2", "parallel: {tp: 2}\n");
  const fs::path run = cfg.parent_path() / "run";
  const Outcome o = run_shell(mpiexec() + "-n 2 " + dayzero_bin() + " preflight " + cfg.string() + " --dump-dir " +
                              run.string() + kSmall);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json doc = json::parse(read_file(run / "preflight.json"));
  expect_schema(doc, 2);
  EXPECT_EQ(doc["plan"]["tp"], 2);
  const json* tp = find_test(doc, "tp all_reduce");
  ASSERT_NE(tp, nullptr) << doc["tests"].dump(2);
  EXPECT_EQ((*tp)["figures"][0]["subject"], "tp@pp0.dp0");
  const json* rd = find_test(doc, "read");
  ASSERT_NE(rd, nullptr);
  EXPECT_NE((*rd)["what"].get<std::string>().find("checkpoint shards"), std::string::npos);
  EXPECT_TRUE(doc["ranks"][0]["checkpoint"]["filesystem"].is_string());
}

// An MoE model, so that each axis of a plan has its collective: pp send/recv between the stages
// of pp 2, the ep all-to-all of tp 2 x ep 2.
TEST(Preflight, PipelineHopsAndExpertAllToAllAreTestedOnTheirGroups) {
  const fs::path d = scratch_dir("preflight-moe");
  make_model_from_yaml(golden_sizes("qwen3_moe"), d / "model", "--dtype float32");
  const std::pair<std::string, std::pair<std::string, std::string>> cases[] = {
      {"{pp: 2}", {"pp send_recv", "pp@dp0.tp0 stage 0->1"}},
      {"{tp: 2, ep: 2}", {"ep all_to_all", "ep@pp0.dp0.etp0"}}};
  int i = 0;
  for (const auto& [parallel, want] : cases) {
    const fs::path cfg = d / ("run" + std::to_string(i) + ".yaml");
    write_file(cfg, "model: {path: " + (d / "model").string() + ", dtype: float32}\nparallel: " + parallel +
                        "\nprompts:\n  - {id: raw, tokens: [3, 17, 42]}\n");
    const fs::path run = d / ("out" + std::to_string(i++));
    const Outcome o = run_shell(mpiexec() + "-n 2 " + dayzero_bin() + " preflight " + cfg.string() + " --dump-dir " +
                                run.string() + kSmall);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const json doc = json::parse(read_file(run / "preflight.json"));
    expect_schema(doc, 2);
    const json* t = find_test(doc, want.first);
    ASSERT_NE(t, nullptr) << parallel << ": " << doc["tests"].dump(2);
    ASSERT_EQ((*t)["figures"].size(), 1u);
    EXPECT_EQ((*t)["figures"][0]["subject"], want.second);
  }
}

TEST(Preflight, StalledTpAllReduceEndsWithExit3NamingTheGroup) {
  const fs::path cfg = write_config("preflight-stall",
                                    "parallel: {tp: 2}\nwatchdog: {collective_timeout_s: 2}\n"
                                    "debug: {stall: {rank: 1, before: \"tp all_reduce #2\"}}\n");
  const fs::path run = cfg.parent_path() / "run";
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = run_shell(mpiexec() + "-n 2 " + dayzero_bin() + " preflight " + cfg.string() + " --dump-dir " +
                              run.string() + " --read-mib 8 --collective-mib 1");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.exit_code, 3) << o.output;
  EXPECT_LT(s, 30) << o.output;
  EXPECT_NE(o.output.find("rank 0: watchdog: all_reduce #2 of tp@pp0.dp0 did not finish within 2 s"),
            std::string::npos)
      << o.output;
  const json hang = json::parse(read_file(run / "preflight-hang-rank-00000.json"));
  EXPECT_EQ(hang["label"], "tp@pp0.dp0");
  EXPECT_EQ(hang["exit_code"], 3);
}

TEST(Preflight, BadInputExitsTwo) {
  const fs::path d = scratch_dir("preflight-bad");
  Outcome o = run_shell(mpiexec() + "-n 1 " + dayzero_bin() + " preflight --dump-dir " + (d / "a").string() +
                        " --outlier-fraction 1.5");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--outlier-fraction: must be in (0, 1]"), std::string::npos) << o.output;
  o = run_shell(mpiexec() + "-n 1 " + dayzero_bin() + " preflight " + (d / "missing.yaml").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("missing.yaml"), std::string::npos) << o.output;
  const fs::path cfg = write_config("preflight-badkey", "preflight: {outlier_fraction: 0}\n");
  o = run_shell(mpiexec() + "-n 1 " + dayzero_bin() + " preflight " + cfg.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("preflight.outlier_fraction"), std::string::npos) << o.output;
  // backend: cuda where no GPU is visible: the job would not start, nor does its preflight.
  const fs::path cuda = write_config("preflight-nocuda", "backend: cuda\n");
  o = run_shell("CUDA_VISIBLE_DEVICES= " + mpiexec() + "-x CUDA_VISIBLE_DEVICES -n 1 " + dayzero_bin() + " preflight " +
                cuda.string() + " --dump-dir " + (cuda.parent_path() / "run").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("backend: cuda"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(cuda.parent_path() / "run" / "preflight.json"));
}

}  // namespace
}  // namespace dayzero::e2e
