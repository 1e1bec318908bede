// NcclComm: the Comm of one plan group for device tensors, over an NCCL communicator
// bootstrapped from the group's MpiComm (the group's rank 0 makes the unique id, MPI broadcasts
// it, every member calls ncclCommInitRank inside ncclGroupStart/End). Collectives are enqueued
// on the compute stream the caller names; the call then waits for a CUDA event recorded after
// them, polling it and ncclCommGetAsyncError, and aborts the communicator (ncclCommAbort) when
// the collective timeout passes. The timeline records the enqueue ("<op> enqueue") and the
// completion ("<op>") as two events. Host tensors and the host helpers (barrier, max, argmax)
// go to the MpiComm. The wait's and the group's host logic (clearing the "not ready" the event
// poll leaves as CUDA's last error; closing a group on every path) is completion_wait.h's.
// Compiled only with CUDA (DAYZERO_WITH_CUDA); not the group construction.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/forwarding_comm.h"
#include "comm/mpi_comm.h"

namespace dayzero::dump {
class Timeline;
}

namespace dayzero::comm {

#ifdef DAYZERO_WITH_CUDA

class NcclComm final : public ForwardingComm {
 public:
  // Collective over mpi's group: every member calls with its own device (the current CUDA
  // device is set to it) and the stream its backend computes on (a cudaStream_t). Errors, the
  // same on every member: InvalidArgument when two members of the group share one GPU (NCCL
  // needs one GPU per rank; comm: mpi stages buffers and allows it), naming the ranks, the host
  // and the device; Internal for an NCCL or CUDA failure, naming the call. timeline may be
  // null; mpi and timeline are not owned and must outlive the NcclComm. timeout_s bounds
  // every collective's wait (a run passes nccl_wait_timeout_s(watchdog.collective_timeout_s)).
  static Result<std::unique_ptr<NcclComm>> create(MpiComm& mpi, int device, void* stream, dump::Timeline* timeline,
                                                  double timeout_s);
  ~NcclComm() override;

  // As comm.h, except that the sums of f32 tensors follow NCCL's reduction order (deterministic
  // for one machine, one plan and one NCCL version; not the group-rank order of MpiComm).
  Status all_reduce_sum(Tensor& t) override;
  Status all_gather(const Tensor& in, Tensor& out) override;
  Status reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  // Device tensors: one ncclGroupStart/End of an ncclSend and an ncclRecv per peer with rows.
  Status all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                     std::span<const int64_t> recv_rows, const char* op) override;
  Status broadcast(Tensor& t, int root) override;
  Status send(const Tensor& t, int peer, int tag) override;
  Status recv(Tensor& t, int peer, int tag) override;
  const char* current_op() const override;
  int64_t next_seq() const override { return seq_; }

  // True once the communicator was aborted (a timeout or an asynchronous NCCL error): every
  // later call returns an error without touching NCCL.
  bool aborted() const { return aborted_; }

 private:
  struct Impl;
  NcclComm(MpiComm& mpi, dump::Timeline* timeline, double timeout_s);
  class Op;
  // Waits for the work enqueued so far on the stream; aborts on timeout or NCCL error.
  Status wait(const char* op);

  MpiComm& mpi_;
  dump::Timeline* timeline_;
  double timeout_s_;
  std::unique_ptr<Impl> impl_;
  std::vector<int> world_ranks_;
  int64_t seq_ = 0;
  std::atomic<const char*> current_op_{nullptr};
  bool aborted_ = false;
};

#endif  // DAYZERO_WITH_CUDA

}  // namespace dayzero::comm
