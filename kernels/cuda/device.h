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

}  // namespace dayzero::kernels::cuda
