// What the CUDA runtime, cuBLAS and NCCL of this build report about the machine. Compiled
// whenever the toolkit is found (DAYZERO_CUDA=AUTO|ON); callable where no GPU is visible,
// in which case device_count is 0 and `error` says why.
#pragma once

#include <string>

namespace dayzero::kernels::cuda {

struct CudaProbe {
  int device_count = 0;
  int runtime_version = 0;  // e.g. 13000
  int cublas_version = 0;
  int nccl_version = 0;     // e.g. 22805
  std::string first_device_name;
  std::string error;        // empty when a device was found
};

CudaProbe probe();

// Whether the runtime keeps a "not ready" event poll as the thread's last error, where a kernel
// launch check (kernels/cuda/common.cuh) would read it: on device 0, a kernel that spins for
// about spin_ms, an event recorded after it, one cudaEventQuery while it runs, then an empty
// kernel launched and cudaGetLastError read, as launch_status reads it. Returns
// "query=<name> launch_status_sees=<name>" (cudaErrorNotReady after the launch: the runtime
// keeps it, and a wait that polls must clear it); an error sentence when no device is usable.
std::string not_ready_probe(int spin_ms = 200);

}  // namespace dayzero::kernels::cuda
