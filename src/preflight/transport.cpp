// Preflight's transports by the run's rule (transport.h).
#include "preflight/transport.h"

#include "preflight/classes.h"

namespace dayzero::preflight {

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kMpiHost: return "mpi (host buffers)";
    case Transport::kMpiStaged: return "mpi (device buffers staged through host memory)";
    case Transport::kNccl: return "nccl (device buffers)";
  }
  return "?";
}

Result<TransportChoice> choose_transports(const TransportInputs& in) {
  TransportChoice c;
  c.transport.fill(Transport::kMpiHost);
  c.comm = "mpi";
  c.backend = "cpu";
  std::vector<int> without, with;
  for (size_t r = 0; r < in.visible_gpus.size(); ++r) (in.visible_gpus[r] > 0 ? with : without).push_back(static_cast<int>(r));
  if (!in.cuda_built) {
    if (in.backend == config::Backend::kCuda)
      return Status::InvalidArgument("backend: cuda cannot take effect: this dayzero was built without CUDA");
    c.backend_reason = "this dayzero was built without CUDA";
    return c;
  }
  switch (in.backend) {
    case config::Backend::kCpu: c.backend_reason = "backend: cpu"; return c;
    case config::Backend::kCuda:
      if (!without.empty())
        return Status::InvalidArgument("backend: cuda, but no CUDA device is visible on " + where(without, in.hosts));
      c.backend_reason = "backend: cuda";
      break;
    case config::Backend::kAuto:
      if (with.empty()) {
        c.backend_reason = "auto: no CUDA device visible";
        return c;
      }
      // Each rank of the job would pick its own backend: the gpus.count mismatch names them.
      if (!without.empty()) {
        c.backend_reason = "auto: a CUDA device visible on some ranks only (" + where(with, in.hosts) +
                           "); the tests ran on the CPU";
        return c;
      }
      c.backend_reason = "auto: a CUDA device visible on every rank";
      break;
  }
  c.cuda = true;
  c.backend = "cuda";
  const comm::CommRequest request = in.comm == config::CommKind::kNccl  ? comm::CommRequest::kNccl
                                    : in.comm == config::CommKind::kMpi ? comm::CommRequest::kMpi
                                                                        : comm::CommRequest::kAuto;
  constexpr auto kWorld = static_cast<size_t>(comm::GroupKind::kWorld);
  constexpr auto kTp = static_cast<size_t>(comm::GroupKind::kTp);
  std::array<int, 6> sizes = in.group_sizes;
  if (in.world_moves_device_tensors) sizes = {1, in.group_sizes[kWorld], 1, 1, 1, 1};  // the world in tp's place
  const comm::DeviceCommChoice d = comm::choose_device_comm(request, in.gpu_keys, sizes);
  c.comm = d.record;
  if (in.world_moves_device_tensors) {
    c.transport[kWorld] = d.nccl[kTp] ? Transport::kNccl : Transport::kMpiStaged;
    if (const auto p = c.comm.find("(tp;"); p != std::string::npos) c.comm.replace(p, 4, "(world;");
    return c;
  }
  for (size_t i = 0; i < comm::kGroupKinds.size(); ++i)
    c.transport[i] = d.nccl[i]                                           ? Transport::kNccl
                     : comm::moves_device_tensors(comm::kGroupKinds[i]) ? Transport::kMpiStaged
                                                                         : Transport::kMpiHost;
  return c;
}

}  // namespace dayzero::preflight
