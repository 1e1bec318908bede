// The cuBLAS GEMM of the CUDA backend: y[m, n] = x[m, k] · w[n, k]^T (+ y), row-major, a
// Linear weight [out=n, in=k]. bf16 inputs with f32 accumulation and an f32 output, or all
// f32 (no TF32) on request. One handle per backend, bound to its compute stream. Not the
// element-wise ops (ops.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/ops.h"

namespace dayzero::kernels::cuda {

// "cublas <op>: CUBLAS_STATUS_... (<what>)" for a failed call; Ok for CUBLAS_STATUS_SUCCESS.
Status cublas_status(cublasStatus_t s, const char* op, const std::string& what = "");

// cuBLAS's version (e.g. 130100); Unsupported when the library cannot be loaded. Creates a
// handle: needs a device.
Status cublas_version(int* version);

class Gemm {
 public:
  Gemm() = default;
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Loads cuBLAS (dlopen, once per process), creates the handle on the current device and
  // binds it to stream; default math mode, f32 GEMMs with the pedantic compute type (no
  // TF32). Unsupported when cuBLAS cannot be loaded, naming what was tried.
  Status init(cudaStream_t stream);
  // y = x · w^T (+ y when accumulate). x and w of the same element type (both bf16 or both
  // f32); y f32. Errors name the shapes.
  Status matmul_nt(int64_t m, int64_t n, int64_t k, Elem elem, const void* x, const void* w, float* y,
                   bool accumulate);
  int version() const { return version_; }

 private:
  cublasHandle_t handle_ = nullptr;
  int version_ = 0;
};

}  // namespace dayzero::kernels::cuda
