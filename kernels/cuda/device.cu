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

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}
__global__ void noop_kernel() {}

}  // namespace

std::string not_ready_probe(int spin_ms) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return "no CUDA device is visible";
  }
  if (cudaSetDevice(0) != cudaSuccess) return "cudaSetDevice(0) failed";
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
    return "cudaStreamCreate or cudaEventCreate failed";
  cudaGetLastError();
  spin_kernel<<<1, 1, 0, s>>>(static_cast<long long>(khz > 0 ? khz : 1000000) * spin_ms);
  cudaEventRecord(e, s);
  const cudaError_t q = cudaEventQuery(e);
  noop_kernel<<<1, 1, 0, s>>>();
  const cudaError_t seen = cudaGetLastError();
  cudaStreamSynchronize(s);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaGetLastError();
  return std::string("query=") + cudaGetErrorName(q) + " launch_status_sees=" + cudaGetErrorName(seen);
}

}  // namespace dayzero::kernels::cuda
