// MpiComm: the Comm interface (comm.h) over one MPI communicator, moving host tensors. The
// CPU reference path and the host helpers of every run. Each call is recorded on the
// timeline (kind "collective" or "p2p", name the op, group the label, per-group seq, bytes)
// with its begin logged before MPI is entered, so a rank stuck inside shows where it is.
// Not the group construction (groups.h); not for device buffers (an NCCL Comm does those).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace dayzero::dump {
class Timeline;
}

namespace dayzero::comm {

class MpiComm final : public Comm {
 public:
  // Wraps comm (a communicator this rank belongs to). When owns, comm is freed at
  // destruction (unless MPI is finalized by then). name: the group kind ("tp"); label: the
  // group instance ("tp@pp1.dp0"). timeline may be null (nothing recorded); it is not owned
  // and must outlive this object.
  MpiComm(MPI_Comm comm, bool owns, std::string name, std::string label,
          dump::Timeline* timeline);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::string& label() const override { return label_; }

  // all_reduce_sum is an all-to-all of 1/size() chunks, a local sum of each chunk in rank
  // order, then an all-gather of the summed chunks: MPI_Allreduce(MPI_SUM) on floats may
  // change its summation order with the message size and the algorithm MPI picks, and that
  // would break "same plan twice: bit-exact". Traffic and memory stay those of a ring
  // all-reduce (one extra buffer the size of t), not size() copies of t.
  Status all_reduce_sum(Tensor& t) override;
  Status all_gather(const Tensor& in, Tensor& out) override;
  // An all-to-all of the dim-0 blocks, then the rank-order sum of this rank's block.
  Status reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  // One MPI_Alltoallv of bytes.
  Status all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                     std::span<const int64_t> recv_rows, const char* op) override;
  Status broadcast(Tensor& t, int root) override;
  Status send(const Tensor& t, int peer, int tag) override;
  Status recv(Tensor& t, int peer, int tag) override;
  Status barrier() override;
  Status all_reduce_max_int(int64_t* v, int n) override;
  Status argmax_across(float value, int64_t index, float* best_value,
                       int64_t* best_index) override;

  const char* current_op() const override { return current_op_.load(std::memory_order_acquire); }
  int64_t next_seq() const override { return seq_; }

  // The communicator, for host traffic that is not tensor data (e.g. broadcasting an NCCL
  // unique id). Calls made on it directly are not recorded.
  MPI_Comm handle() const { return comm_; }
  // The world rank of every group rank, in group-rank order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 private:
  class Op;  // records one call: current_op_, seq_, the timeline begin/end

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_ = false;
  int rank_ = 0, size_ = 1;
  std::string name_, label_;
  std::vector<int> world_ranks_;
  dump::Timeline* timeline_ = nullptr;
  int64_t seq_ = 0;
  std::atomic<const char*> current_op_{nullptr};
};

}  // namespace dayzero::comm
