// Device memory a CUDA rank holds beyond the plan's memory model (plan/memory.h counts weights,
// KV cache, activations and a fixed headroom): the backend's staging buffers, cuBLAS's
// workspace, NCCL's buffers per communicator and the two GEMM workspaces (gemm_workspace.h),
// and the check of all of it against the device's free memory before anything is allocated.
// Host code, so that it is tested on the CPU; not the allocations (cuda_backend.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dayzero::backend {

// The CUDA backend's two device staging buffers (and two pinned host buffers of the same size,
// which are host memory): weights cross PCIe through them.
inline constexpr int64_t kCudaStagingBufferBytes = int64_t{32} << 20;
inline constexpr int64_t kCudaStagingDeviceBytes = 2 * kCudaStagingBufferBytes;
// cuBLAS's default workspace per handle (32 MiB on Hopper, 4 MiB before; the larger is counted).
inline constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;
// NCCL's device buffers per communicator (channels x peers x protocol buffers, allocated at
// init and at the first collective). An estimate, not measured here: NCCL's default 4 MiB
// buffer per channel, send and receive, for up to 32 channels on NVLink machines, rounded up
// to 512 MiB; the first multi-GPU run compares it with nvidia-smi's used memory.
inline constexpr int64_t kNcclCommBytes = int64_t{512} << 20;

struct DeviceOverhead {
  int64_t staging = 0;          // kCudaStagingDeviceBytes
  int64_t cublas = 0;           // kCublasWorkspaceBytes
  int64_t nccl = 0;             // kNcclCommBytes x the NCCL communicators of this rank
  int64_t gemm_weight = 0;      // GemmWorkspaceBounds::Bytes::weight
  int64_t gemm_activation = 0;  // GemmWorkspaceBounds::Bytes::activation
  int64_t total() const { return staging + cublas + nccl + gemm_weight + gemm_activation; }
  // "staging 64 MiB, cuBLAS 32 MiB, NCCL 0 MiB (0 communicators), GEMM workspaces 1152 MiB"
  std::string describe() const;
  int nccl_comms = 0;
};

// The overhead of a CUDA rank with n NCCL communicators and these GEMM workspace bounds.
DeviceOverhead cuda_device_overhead(int nccl_comms, int64_t gemm_weight_bytes, int64_t gemm_activation_bytes);

// The plan check of a CUDA rank, before the backend allocates: InvalidArgument when the plan's
// bytes (weights, KV cache, activations, headroom) plus the overhead exceed what the device has
// free, naming the device, each part and the way out (more ranks or a smaller
// memory_fraction); Ok otherwise, and when plan_bytes is 0 (no estimate).
Status check_device_fit(int64_t plan_bytes, const DeviceOverhead& overhead, int device, int64_t free_bytes,
                        int64_t total_bytes);

}  // namespace dayzero::backend
