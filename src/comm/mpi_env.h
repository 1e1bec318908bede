// The MPI environment of one dayzero process: init/finalize, world rank and size, the node
// this rank shares memory with, and the fail-together agreement every phase ends with.
// Not the Comm interface for tensor traffic (that carries host/device buffers per group).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::comm {

class MpiEnv {
 public:
  // Initialises MPI, asking for MPI_THREAD_MULTIPLE, unless already initialised.
  MpiEnv(int* argc, char*** argv);
  ~MpiEnv();  // finalises if this object initialised MPI
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int local_rank() const { return local_rank_; }    // rank among the ranks of this node
  int local_size() const { return local_size_; }    // ranks on this node
  const std::string& hostname() const { return hostname_; }
  // The thread level MPI provided (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE). Only at
  // MPI_THREAD_MULTIPLE may a thread other than the main one call MPI (MPI_Abort included).
  int thread_level() const { return thread_level_; }

 private:
  bool owns_ = false;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1, thread_level_ = 0;
  std::string hostname_;
};

// The helpers below each report to the op observer (op_watch.h) as group "env", label
// "world.env", op "agree", "clock_offset", "broadcast_string", "all_gather_strings" or
// "all_reduce_min", with one sequence over all of them; so the watchdog covers them.

// Collective over MPI_COMM_WORLD: every rank passes its own status and gets back the same
// verdict: Ok when all are ok, else the failure of the lowest failing rank (its code and
// message, prefixed "rank N" and, when several failed, the count of failing ranks).
Status agree(const Status& local);

// Collective over MPI_COMM_WORLD: this rank's CLOCK_REALTIME minus rank 0's, in ns,
// estimated from the fastest of a few ping-pongs with rank 0 (0 on rank 0).
int64_t measure_clock_offset_ns();

// Collective: rank 0's string on every rank.
std::string broadcast_string(const std::string& s);
// Collective: every rank's string, in rank order.
std::vector<std::string> all_gather_strings(const std::string& s);
// Collective: the minimum over all ranks.
int64_t all_reduce_min(int64_t v);

}  // namespace dayzero::comm
