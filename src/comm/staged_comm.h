// StagedComm: a Comm for device tensors in front of a Comm that moves host tensors only
// (MpiComm): each call copies its device inputs to host memory, runs the inner call on the
// copies and copies the results back. This is how `comm: mpi` carries the CUDA backend's
// collectives, so several ranks can share one GPU in tests. Not a device transport (NCCL,
// nccl_comm.h) and not fast: every call pays two device <-> host copies.
#pragma once

#include <functional>
#include <memory>

#include "comm/comm.h"
#include "comm/forwarding_comm.h"

namespace dayzero::comm {

// How a device tensor reaches host memory and back; the backend provides both (comm/ sits
// below backend/, so it takes functions rather than the Backend).
struct DeviceStaging {
  // A host tensor of the same dtype and shape holding t's values; complete on return.
  std::function<Tensor(const Tensor& t)> to_host;
  // Writes host's values into the device tensor dst (same dtype and numel).
  std::function<void(const Tensor& host, Tensor& dst)> to_device;
};

// Same contract as Comm (comm.h) for tensors on any device: host tensors and undefined ones
// go to the inner Comm untouched (so its argument errors are returned as they are), device
// tensors are staged. The inner Comm is not owned and must outlive this one; its timeline
// events and op observer reports are the ones recorded (bytes of the staged copies).
class StagedComm final : public ForwardingComm {
 public:
  StagedComm(Comm& inner, DeviceStaging staging) : ForwardingComm(inner), staging_(std::move(staging)) {}

  Status all_reduce_sum(Tensor& t) override;
  Status all_gather(const Tensor& in, Tensor& out) override;
  Status reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  Status all_to_allv(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                     std::span<const int64_t> recv_rows, const char* op) override;
  Status broadcast(Tensor& t, int root) override;
  Status send(const Tensor& t, int peer, int tag) override;
  Status recv(Tensor& t, int peer, int tag) override;
  const char* current_op() const override { return inner_.current_op(); }
  int64_t next_seq() const override { return inner_.next_seq(); }

 private:
  static bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }
  Tensor host_of(const Tensor& t) const { return on_device(t) ? staging_.to_host(t) : t; }
  // A host buffer for an output: t itself when it is on the host, a fresh one otherwise.
  static Tensor host_out(const Tensor& t) {
    return on_device(t) ? Tensor::host_uninitialized(t.dtype(), t.shape()) : t;
  }
  void back(const Tensor& host, Tensor& t) const {
    if (on_device(t)) staging_.to_device(host, t);
  }

  DeviceStaging staging_;
};

}  // namespace dayzero::comm
