// The CUDA part of a rank's inventory (`dayzero preflight`): runtime, driver, cuBLAS and NCCL
// versions as loaded at run time, and every device this process sees. Callable where no GPU is
// visible (devices empty, error says why); never selects or initialises a device it does not list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dayzero::kernels::cuda {

struct GpuDevice {
  int index = 0;  // the CUDA device ordinal of this process (after CUDA_VISIBLE_DEVICES)
  std::string name, pci_bus_id;
  int64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  bool ecc = false;                // ECC enabled, as the driver reports it
};

struct CudaInventory {
  int runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
  int driver_version = 0;   // cudaDriverGetVersion; 0 without a driver
  int cublas_version = 0;   // e.g. 130100; 0 when no device (cuBLAS needs one) or not loadable
  int nccl_version = 0;     // ncclGetVersion, e.g. 22805
  std::vector<GpuDevice> devices;
  std::string error;        // empty when the device list was read
};

CudaInventory inventory();

}  // namespace dayzero::kernels::cuda
