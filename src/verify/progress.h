// Job-wide progress of `dayzero verify`, shown by rank 0 like the loader's: every rank counts
// the bytes it has hashed; ranks other than 0 send their count to rank 0 at most once a second
// on a communicator of their own (non-blocking, one message in flight), rank 0 takes them in
// between its own blocks and prints one ProgressLine. Not a collective until finish().
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/progress_line.h"

namespace dayzero::verify {

class VerifyProgress {
 public:
  // Collective over MPI_COMM_WORLD (duplicates it). total: the job's bytes to read (0: nothing
  // is shown, as in structure-only mode).
  explicit VerifyProgress(uint64_t total);
  ~VerifyProgress();
  VerifyProgress(const VerifyProgress&) = delete;
  VerifyProgress& operator=(const VerifyProgress&) = delete;

  // This rank has read n more bytes. Cheap: a clock read unless a second has passed.
  void add(uint64_t n);
  // Collective over MPI_COMM_WORLD: every rank's final count reaches rank 0 (which keeps
  // printing while it waits), whose line is then ended. Call once, on every rank, also when
  // this rank's files failed to read.
  void finish();

 private:
  void send(bool final_count);  // ranks > 0
  void poll();                  // rank 0: take every message waiting, print when due

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  uint64_t total_, done_ = 0;
  int64_t last_ns_ = 0;
  MPI_Request pending_ = MPI_REQUEST_NULL;
  uint64_t message_[2] = {0, 0};     // [bytes done, 1 when final]: the buffer of pending_
  std::vector<uint64_t> done_of_;    // rank 0: the last count of each rank
  std::vector<bool> final_of_, heard_of_;
  ProgressLine line_{"verify"};
  bool finished_ = false;
};

}  // namespace dayzero::verify
