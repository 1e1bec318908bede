// NCCL or host-staged communicators in front of a job's groups (device_groups.h).
#include "runtime/device_groups.h"

#include <memory>

#include "comm/nccl_comm.h"
#include "comm/staged_comm.h"

namespace dayzero::runtime {

Status wrap_groups_for_device(comm::ProcessGroups& groups, backend::Backend& be, int device,
                              const std::array<bool, 6>& nccl, dump::Timeline* timeline, double nccl_wait_s) {
  // MPI moves host tensors: device tensors are staged through host memory on every call.
  backend::Backend* b = &be;
  const comm::DeviceStaging staging{[b](const Tensor& t) {
                                      Tensor h = Tensor::host_uninitialized(t.dtype(), t.shape());
                                      b->to_host(t, h);
                                      return h;
                                    },
                                    [b](const Tensor& h, Tensor& dst) { b->copy(b->to_device(h), dst); }};
  Status first;
  groups.wrap_each([&](comm::MpiComm& m, comm::GroupKind kind) -> std::unique_ptr<comm::Comm> {
    if (!nccl[static_cast<size_t>(kind)]) return std::make_unique<comm::StagedComm>(m, staging);
#ifdef DAYZERO_WITH_CUDA
    // Collective over m's group; every rank wraps the groups in the same order. The wait
    // outlasts the watchdog's deadline on the same op, whose hang report comes first.
    auto c = comm::NcclComm::create(m, device, b->device_stream(), timeline, nccl_wait_s);
    if (c.ok()) return std::move(c).value();
    if (first.ok()) first = c.status();
#else
    (void)device, (void)timeline, (void)nccl_wait_s;
#endif
    return std::make_unique<comm::StagedComm>(m, staging);
  });
  return first;
}

}  // namespace dayzero::runtime
