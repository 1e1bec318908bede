// Planner benchmark (not a test): time of choose_plan for Llama-3.1-405B on 1, 16 and 128
// nodes of 8 x 80 GiB GPUs (8, 128 and 1024 ranks), and of a wide expert-parallel plan for
// Kimi-K2 on 64 nodes of 8 x 141 GiB asked for ep = 64 (512 ranks), median of repeated runs,
// with the plan chosen (or why none fits). Usage: plan_bench [--config PATH] [--reps N].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/model_folder.h"
#include "plan/plan_request.h"

using namespace dayzero;

namespace {

// Median, min and max of `reps` choose_plan calls on `req`, and the plan (or why none).
void time_plans(const plan::PlanRequest& req, int reps, const char* label) {
  std::vector<double> ms;
  std::string verdict;
  size_t considered = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<plan::Candidate> cands;
    const auto t0 = std::chrono::steady_clock::now();
    auto p = plan::choose_plan(req, &cands);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    considered = cands.size();
    verdict = p.ok() ? "dp=" + std::to_string(p->dp) + " pp=" + std::to_string(p->pp) + " tp=" + std::to_string(p->tp) +
                           (p->wide_ep() ? " ep=" + std::to_string(p->ep) + " ep_dp=" + std::to_string(p->ep_dp) : "")
                     : p.status().message();
  }
  std::sort(ms.begin(), ms.end());
  std::printf("  %s: %8.2f ms (min %.2f, max %.2f), %zu candidates -> %s\n", label, ms[ms.size() / 2], ms.front(),
              ms.back(), considered, verdict.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = std::string(DAYZERO_SOURCE_DIR) + "/tests/fixtures/configs/Meta-Llama-3.1-405B/config.json";
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config")) config_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  auto m = model::open_model_folder(config_path, model::WeightsNeeded::kIfPresent);
  if (!m.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", m.status().message().c_str());
    return 2;
  }
  const model::HParams* hp = &m->hp;

  std::printf("choose_plan, %s (%lld layers), nodes of 8 x 80 GiB, median of %d runs\n", config_path.c_str(),
              static_cast<long long>(hp->n_layer), reps);
  for (int nodes : {1, 16, 128}) {
    plan::RequestInputs in;
    in.topo.nodes = nodes;
    in.topo.gpus_per_node = 8;
    in.topo.device_memory_bytes = int64_t{80} << 30;
    auto request = plan::make_plan_request(*m, in);
    if (!request.ok()) {
      std::fprintf(stderr, "plan_bench: %s\n", request.status().message().c_str());
      return 2;
    }
    char label[64];
    std::snprintf(label, sizeof label, "%4d nodes (%5d ranks)", nodes, nodes * 8);
    time_plans(*request, reps, label);
  }

  // Wide expert parallelism: Kimi-K2 (384 experts) with ep = 64 over 512 ranks.
  const std::string kimi = std::string(DAYZERO_SOURCE_DIR) + "/tests/fixtures/configs/Kimi-K2-Instruct/config.json";
  auto k = model::open_model_folder(kimi, model::WeightsNeeded::kIfPresent);
  if (!k.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", k.status().message().c_str());
    return 2;
  }
  plan::RequestInputs in;
  in.topo.nodes = 64;
  in.topo.gpus_per_node = 8;
  in.topo.device_memory_bytes = int64_t{141} << 30;
  in.ep = 64;
  auto request = plan::make_plan_request(*k, in);
  if (!request.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", request.status().message().c_str());
    return 2;
  }
  std::printf("choose_plan, %s, 64 nodes of 8 x 141 GiB, ep = 64, median of %d runs\n", kimi.c_str(), reps);
  time_plans(*request, reps, "  64 nodes (  512 ranks)");
  return 0;
}
