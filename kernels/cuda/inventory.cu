// The CUDA inventory (inventory.h): library versions and each visible device's properties.
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/inventory.h"

namespace dayzero::kernels::cuda {

CudaInventory inventory() {
  CudaInventory inv;
  cudaRuntimeGetVersion(&inv.runtime_version);
  cudaDriverGetVersion(&inv.driver_version);
  ncclGetVersion(&inv.nccl_version);
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    inv.error = cudaGetErrorString(err);
    return inv;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    const cudaError_t e = cudaGetDeviceProperties(&prop, i);
    if (e != cudaSuccess) {
      inv.error = "device " + std::to_string(i) + ": " + cudaGetErrorString(e);
      continue;
    }
    GpuDevice d;
    d.index = i;
    d.name = prop.name;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.ecc = prop.ECCEnabled != 0;
    inv.devices.push_back(d);
  }
  if (n > 0 && !cublas_version(&inv.cublas_version).ok()) inv.cublas_version = 0;
  return inv;
}

}  // namespace dayzero::kernels::cuda
