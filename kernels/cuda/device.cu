// CUDA probe: device count and library versions, without touching a device that is absent.
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"

namespace dayzero::kernels::cuda {

CudaProbe probe() {
  CudaProbe p;
  cudaRuntimeGetVersion(&p.runtime_version);
  ncclGetVersion(&p.nccl_version);
  const cudaError_t err = cudaGetDeviceCount(&p.device_count);
  if (err != cudaSuccess) {
    p.device_count = 0;
    p.error = cudaGetErrorString(err);
    return p;
  }
  if (p.device_count == 0) {
    p.error = "no CUDA device visible";
    return p;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) p.first_device_name = prop.name;
  if (!cublas_version(&p.cublas_version).ok()) p.cublas_version = 0;
  return p;
}

}  // namespace dayzero::kernels::cuda
