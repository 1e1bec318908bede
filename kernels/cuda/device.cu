// CUDA probe: device count and library versions, without touching a device that is absent.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/device.h"

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
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    cublasGetVersion(h, &p.cublas_version);
    cublasDestroy(h);
  }
  return p;
}

}  // namespace dayzero::kernels::cuda
