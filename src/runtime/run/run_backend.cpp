// The backend phase of a run: the compute backend of this rank (CPU today) with its threads and
// memory budget. Not where tensors are placed (run_load.cpp) nor the dump file's record of it
// (run_folder.cpp).
#include <algorithm>
#include <cstdlib>
#include <thread>

#include "backend/backend.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

int default_threads(const comm::MpiEnv& env) {
  if (const char* e = std::getenv("DAYZERO_THREADS")) return std::max(1, std::atoi(e));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_size()));
}

}  // namespace

Status Run::create_backend() {
  backend::BackendOptions bo;
  bo.kind = "cpu";
  bo.threads = args_.threads > 0 ? args_.threads : cfg_.runtime.threads.value_or(default_threads(env_));
  if (cfg_.topology.device_memory_gib)
    bo.memory_budget_bytes = static_cast<int64_t>(*cfg_.topology.device_memory_gib * (1LL << 30));
  DZ_ASSIGN_OR_RETURN(be_, backend::make_backend(bo));
  return Status::Ok();
}

}  // namespace dayzero::runtime
