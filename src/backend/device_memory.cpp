// The device memory beyond the plan and the plan check of a CUDA rank (device_memory.h).
#include "backend/device_memory.h"

namespace dayzero::backend {
namespace {
std::string device_mib(int64_t b) { return std::to_string(b >> 20) + " MiB"; }
}  // namespace

std::string DeviceOverhead::describe() const {
  return "staging " + device_mib(staging) + ", cuBLAS " + device_mib(cublas) + ", NCCL " + device_mib(nccl) + " (" +
         std::to_string(nccl_comms) + " communicator" + (nccl_comms == 1 ? "" : "s") + "), GEMM workspaces " +
         device_mib(gemm_weight + gemm_activation);
}

DeviceOverhead cuda_device_overhead(int nccl_comms, int64_t gemm_weight_bytes, int64_t gemm_activation_bytes) {
  DeviceOverhead o;
  o.staging = kCudaStagingDeviceBytes;
  o.cublas = kCublasWorkspaceBytes;
  o.nccl_comms = nccl_comms;
  o.nccl = kNcclCommBytes * nccl_comms;
  o.gemm_weight = gemm_weight_bytes;
  o.gemm_activation = gemm_activation_bytes;
  return o;
}

Status check_device_fit(int64_t plan_bytes, const DeviceOverhead& overhead, int device, int64_t free_bytes,
                        int64_t total_bytes) {
  if (plan_bytes <= 0) return Status::Ok();
  const int64_t need = plan_bytes + overhead.total();
  if (need <= free_bytes) return Status::Ok();
  return Status::InvalidArgument("backend cuda: the plan needs " + device_mib(plan_bytes) + " on device " +
                                 std::to_string(device) + " and the backend " + device_mib(overhead.total()) +
                                 " more (" + overhead.describe() + "), " + device_mib(need) +
                                 " in all, but the device has " + device_mib(free_bytes) + " free of " +
                                 device_mib(total_bytes) +
                                 "; use more ranks (tp/pp) or a smaller topology.memory_fraction");
}

}  // namespace dayzero::backend
