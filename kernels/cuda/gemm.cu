// cuBLAS GEMM (gemm.h). Row-major y[m, n] = x[m, k] · w[n, k]^T is, in cuBLAS's column-major
// view, the column-major [n, m] product op_T(w as [k, n]) · (x as [k, m]): transa = T,
// transb = N, lda = ldb = k, ldc = n.
#include "kernels/cuda/gemm.h"

namespace dayzero::kernels::cuda {

namespace {
const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
}  // namespace

Status cublas_status(cublasStatus_t s, const char* op, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string m = std::string("cublas ") + op + ": " + cublas_name(s);
  if (!what.empty()) m += " (" + what + ")";
  return s == CUBLAS_STATUS_ALLOC_FAILED ? Status::OutOfMemory(m) : Status::Internal(m);
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

Status Gemm::init(cudaStream_t stream) {
  if (handle_) return Status::Ok();
  DZ_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle_), "cublasCreate"));
  DZ_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle_, stream), "cublasSetStream"));
  DZ_RETURN_IF_ERROR(cublas_status(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
  return cublas_status(cublasGetVersion(handle_, &version_), "cublasGetVersion");
}

Status Gemm::matmul_nt(int64_t m, int64_t n, int64_t k, Elem elem, const void* x, const void* w, float* y,
                       bool accumulate) {
  if (!handle_) return Status::Internal("cublas matmul: the handle is not initialised");
  const std::string shapes = "x[" + std::to_string(m) + ", " + std::to_string(k) + "] w[" + std::to_string(n) +
                             ", " + std::to_string(k) + "]";
  constexpr int64_t kMax = 0x7fffffff;
  if (m <= 0 || n <= 0 || k <= 0 || m > kMax || n > kMax || k > kMax)
    return Status::InvalidArgument("cublas matmul: shapes out of range: " + shapes);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType_t ab = elem == Elem::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = elem == Elem::kBF16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const int in = static_cast<int>(n), im = static_cast<int>(m), ik = static_cast<int>(k);
  return cublas_status(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w, ab, ik, x, ab, ik,
                                    &beta, y, CUDA_R_32F, in, compute, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx", shapes);
}

}  // namespace dayzero::kernels::cuda
