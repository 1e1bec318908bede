// `dayzero preflight` on a GPU (label gpu; skips where no device is visible): two ranks take the
// job's device path (backend cuda; the world all-reduce on device buffers through NCCL where each
// rank has a GPU of its own, else staged through host memory as comm: auto decides), the
// host-device copy test gives a figure per rank each way, and NVML's MIG and ECC modes are read
// from the driver; with comm: nccl and tp 2 the tp all-reduce runs through NCCL, or, where the
// two ranks must share the one GPU, NcclComm refuses it with exit 2 naming the shared GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

bool gpu_visible(std::string* why, int* n_gpu) {
  if (!backend::cuda_built()) return *why = "this dayzero was built without CUDA", false;
  auto n = backend::cuda_device_count();
  if (!n.ok()) return *why = n.status().message(), false;
  if (*n == 0) return *why = "no CUDA device is visible", false;
  *n_gpu = *n;
  return true;
}

#define SKIP_WITHOUT_GPU(n_gpu)                           \
  do {                                                    \
    std::string why_;                                     \
    if (!gpu_visible(&why_, &(n_gpu))) GTEST_SKIP() << why_; \
  } while (0)

const std::string kSmall = " --read-mib 8 --collective-mib 4 --outlier-fraction 0.05 --timeout 60";
std::string mpiexec() { return "timeout -k 5 60 mpiexec --oversubscribe "; }

const json* find_test(const json& doc, const std::string& name) {
  for (const json& t : doc["tests"])
    if (t["name"] == name) return &t;
  return nullptr;
}

TEST(CudaPreflight, TwoRanksTakeTheDevicePathAndCopyBothWays) {
  int n_gpu = 0;
  SKIP_WITHOUT_GPU(n_gpu);
  const fs::path d = scratch_dir("cuda-preflight");
  const Outcome o = run_shell(mpiexec() + "-n 2 " + dayzero_bin() + " preflight --dump-dir " + (d / "run").string() + kSmall);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::cout << o.output;  // the figures, for the check's log
  const json doc = json::parse(read_file(d / "run" / "preflight.json"));
  EXPECT_EQ(doc["schema"], "dayzero.preflight/2");
  EXPECT_EQ(doc["backend"]["name"], "cuda") << doc["backend"].dump();
  EXPECT_TRUE(doc["not_run"].empty()) << doc["not_run"].dump();
  const json* ar = find_test(doc, "world all_reduce");
  ASSERT_NE(ar, nullptr) << doc["tests"].dump(2);
  EXPECT_EQ((*ar)["transport"], n_gpu >= 2 ? "nccl (device buffers)" : "mpi (device buffers staged through host memory)")
      << doc["comm"];
  for (const char* name : {"h2d copy", "d2h copy"}) {
    const json* t = find_test(doc, name);
    ASSERT_NE(t, nullptr) << name << ": " << doc["tests"].dump(2);
    ASSERT_EQ((*t)["figures"].size(), 2u);
    // PCIe or C2C moves more than 1 GB/s each way on any machine this runs on.
    for (const json& f : (*t)["figures"]) EXPECT_GT(f["value"].get<double>(), 1.0) << name << " " << f.dump();
  }
  // The driver ships libnvidia-ml: its modes are read, not "unknown".
  for (const json& r : doc["ranks"]) {
    EXPECT_EQ(r["versions"]["nvidia_driver"].get<std::string>().rfind("unknown", 0), std::string::npos) << r["versions"];
    ASSERT_FALSE(r["gpus"]["devices"].empty());
    for (const json& dev : r["gpus"]["devices"])
      for (const char* k : {"mig_mode", "ecc_mode"})
        EXPECT_EQ(dev[k].get<std::string>().rfind("unknown", 0), std::string::npos) << k << ": " << dev.dump();
  }
}

TEST(CudaPreflight, CommNcclTakesNcclOrIsRefusedOnASharedGpu) {
  int n_gpu = 0;
  SKIP_WITHOUT_GPU(n_gpu);
  const fs::path d = scratch_dir("cuda-preflight-nccl");
  make_model_from_yaml(golden_sizes("llama"), d / "model", "--dtype float32");
  write_file(d / "run.yaml", "model: {path: " + (d / "model").string() +
                                 ", dtype: float32}\nbackend: cuda\ncomm: nccl\nparallel: {tp: 2}\n"
                                 "prompts:\n  - {id: raw, tokens: [3, 17, 42]}\n");
  const Outcome o = run_shell(mpiexec() + "-n 2 " + dayzero_bin() + " preflight " + (d / "run.yaml").string() +
                              " --dump-dir " + (d / "run").string() + kSmall);
  if (n_gpu == 1) {
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find("comm: nccl needs one GPU per rank"), std::string::npos) << o.output;
    return;
  }
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::cout << o.output;
  const json doc = json::parse(read_file(d / "run" / "preflight.json"));
  const json* tp = find_test(doc, "tp all_reduce");
  ASSERT_NE(tp, nullptr) << doc["tests"].dump(2);
  EXPECT_EQ((*tp)["transport"], "nccl (device buffers)");
  EXPECT_EQ(doc["comm"], "nccl (tp; host tensors and the other groups over MPI)");
}

}  // namespace
}  // namespace dayzero::e2e
