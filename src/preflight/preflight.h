// `dayzero preflight`: checks the cluster before a job, launched as the job would be (one rank
// per device). Each rank's inventory is gathered and the fields that must agree compared; then
// minimal tests, each a ratio to its peers' median measured in the same run: a GEMM per rank,
// a read per node, the plan's collectives per group (tp all-reduce, pp send/recv, ep all-to-all;
// without a run config, an all-reduce over the world) and a pairwise exchange between one rank
// per node. Rank 0 prints a table and writes preflight.json (docs/preflight.md). Every
// communication op runs under the watchdog, so a hang ends the job with exit 3 naming the group.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "comm/mpi_env.h"

namespace dayzero::preflight {

struct PreflightArgs {
  std::string config_path;  // empty: no run config (world all-reduce, scratch-file read)
  std::string dump_dir;     // where preflight.json goes; empty: runs/preflight-{time}
  std::optional<double> outlier_fraction;        // overrides preflight.outlier_fraction
  std::optional<int64_t> read_mib, collective_mib;
  std::optional<double> timeout_s;               // overrides watchdog.collective_timeout_s
  int threads = 0;                               // GEMM threads; 0: cores / ranks on the node
  std::string version;                           // dayzero's
};

// Collective over MPI_COMM_WORLD. Returns the exit code, the same on every rank: 0 every field
// agrees and no figure is an outlier; 1 a mismatch or an outlier; 2 bad input (config, options,
// a plan that does not fit); 3 a fault (an I/O error of a test; a hang ends the process with 3
// from the watchdog).
int run_preflight(const comm::MpiEnv& env, const PreflightArgs& args);

}  // namespace dayzero::preflight
