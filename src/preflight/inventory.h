// One rank's inventory for `dayzero preflight`: what this process sees of its host (CPU, memory,
// GPUs, interfaces, InfiniBand devices, filesystems) and of its software (MPI, HDF5, CUDA runtime,
// dayzero) and the environment variables that change communication or placement. Local only:
// no MPI traffic. Not the comparison across ranks (classes.h) nor the tests (probes.h).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dayzero::preflight {

struct InventoryInputs {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string version;         // dayzero's
  std::string run_dir;         // where preflight.json goes (and the job's run folder, if known)
  std::string checkpoint_dir;  // empty without a run config
};

// The inventory as JSON (docs/preflight.md "preflight.json"). Values of environment variables
// whose names look like secrets (TOKEN, KEY, SECRET, PASSWORD, ...) are replaced by "<redacted>".
nlohmann::ordered_json local_inventory(const InventoryInputs& in);

// True when an environment variable's value must not be printed (its name looks like a secret).
bool looks_secret(const std::string& name);
// True for the variables the inventory records (NCCL_*, UCX_*, OMPI_MCA_* except the launcher's
// per-process bookkeeping, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, ...).
bool recorded_variable(const std::string& name);

}  // namespace dayzero::preflight
