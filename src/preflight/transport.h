// Which path preflight's collectives take, by the run's own rule, so that what is measured is
// what the job will use: the backend (backend: auto -> CUDA where every rank sees a GPU) and, on
// CUDA, the Comm in front of each group (comm/device_comm.h's choose_device_comm: NCCL on device
// buffers, or MPI staging device buffers through host memory); MPI on host buffers on the CPU.
// A pure function of gathered facts, unit-tested on the CPU; not the gather, the backend nor the
// communicators (preflight.cpp).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "comm/device_comm.h"
#include "config/run_config.h"
#include "core/status.h"

namespace dayzero::preflight {

enum class Transport {
  kMpiHost,    // MPI on host buffers (the CPU backend; host helpers on any backend)
  kMpiStaged,  // MPI on device buffers copied through host memory (StagedComm: comm: mpi, shared GPUs)
  kNccl,       // NCCL on device buffers (NcclComm)
};
// "mpi (host buffers)", "mpi (device buffers staged through host memory)", "nccl (device buffers)".
const char* transport_name(Transport t);

struct TransportInputs {
  config::Backend backend = config::Backend::kAuto;  // the run config's (auto without one)
  config::CommKind comm = config::CommKind::kAuto;   // the run config's (auto without one)
  bool cuda_built = false;
  std::vector<int> visible_gpus;      // per world rank: CUDA devices it sees
  std::vector<std::string> hosts;     // per world rank
  std::vector<std::string> gpu_keys;  // per world rank: comm::gpu_key of the device it binds ("" none)
  // Per comm::GroupKind, this rank's group sizes as the run passes them (ep: 1 unless the plan
  // has wide expert parallelism, the only case where the job's tokens move over ep).
  std::array<int, 6> group_sizes{1, 1, 1, 1, 1, 1};
  // Without a run config the world all-reduce stands for the job's device all-reduce: the world
  // takes the rule of a group that moves device tensors.
  bool world_moves_device_tensors = false;
};

struct TransportChoice {
  bool cuda = false;
  std::string backend;  // "cpu" | "cuda"
  // Why: "auto: a CUDA device visible on every rank", "auto: no CUDA device visible",
  // "auto: a CUDA device visible on some ranks only (ranks 2-3); the tests ran on the CPU",
  // "backend: cpu", "backend: cuda", "this dayzero was built without CUDA".
  std::string backend_reason;
  std::array<Transport, 6> transport{};  // per comm::GroupKind
  // The run's sentence (choose_device_comm's record) on CUDA, e.g. "nccl (tp, pp; host tensors
  // and the other groups over MPI)" or "mpi (device buffers staged through host memory; ranks
  // share GPUs)"; without a run config "world" stands where the groups are named; "mpi" on the CPU.
  std::string comm;
};

// InvalidArgument when backend: cuda is asked for and this build has no CUDA, or some rank sees
// no CUDA device (naming the nodes and ranks), the same verdict on every rank given the same
// gathered inputs. REQUIRES: visible_gpus, hosts and gpu_keys of equal, non-zero length.
Result<TransportChoice> choose_transports(const TransportInputs& in);

}  // namespace dayzero::preflight
