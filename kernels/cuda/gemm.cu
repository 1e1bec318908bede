// cuBLAS GEMM (gemm.h). Row-major y[m, n] = x[m, k] · w[n, k]^T is, in cuBLAS's column-major
// view, the column-major [n, m] product op_T(w as [k, n]) · (x as [k, m]): transa = T,
// transb = N, lda = ldb = k, ldc = n. cuBLAS is dlopen()ed on first use, not linked: loading
// libcublasLt costs ~0.4 s, which every dayzero process (CPU runs, tests) would pay otherwise.
#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#define DZ_STR2(x) #x
#define DZ_STR(x) DZ_STR2(x)

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

namespace {

// The cuBLAS entry points the GEMM uses, resolved once per process.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasGetVersion_v2) get_version = nullptr;
  // Spelled out: cuda headers overload cublasGemmEx for C++.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;  // why loading failed; empty when every entry point was found
};

const CublasApi& cublas_api() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    std::string tried;
    for (const char* name : {"libcublas.so." DZ_STR(CUBLAS_VER_MAJOR), "libcublas.so",
#ifdef DAYZERO_CUBLAS_DIR
                             DAYZERO_CUBLAS_DIR "/libcublas.so." DZ_STR(CUBLAS_VER_MAJOR),
#endif
         }) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e ? e : name);
    }
    if (!h) {
      api.error = "cannot load cuBLAS (" + tried + ")";
      return;
    }
    const auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && api.error.empty()) api.error = std::string("cuBLAS lacks ") + name;
    };
    sym(api.create, "cublasCreate_v2");
    sym(api.destroy, "cublasDestroy_v2");
    sym(api.set_stream, "cublasSetStream_v2");
    sym(api.set_math_mode, "cublasSetMathMode");
    sym(api.get_version, "cublasGetVersion_v2");
    sym(api.gemm_ex, "cublasGemmEx");
  });
  return api;
}

}  // namespace

Gemm::~Gemm() {
  if (handle_) cublas_api().destroy(handle_);
}

Status Gemm::init(cudaStream_t stream) {
  if (handle_) return Status::Ok();
  const CublasApi& api = cublas_api();
  if (!api.error.empty()) return Status::Unsupported("cublas: " + api.error);
  DZ_RETURN_IF_ERROR(cublas_status(api.create(&handle_), "cublasCreate"));
  DZ_RETURN_IF_ERROR(cublas_status(api.set_stream(handle_, stream), "cublasSetStream"));
  // Default math: no TF32 for f32 (that needs CUBLAS_TF32_TENSOR_OP_MATH), tensor cores for bf16.
  DZ_RETURN_IF_ERROR(cublas_status(api.set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return cublas_status(api.get_version(handle_, &version_), "cublasGetVersion");
}

Status Gemm::matmul_nt(int64_t m, int64_t n, int64_t k, Elem elem, const void* x, const void* w, float* y,
                       bool accumulate) {
  if (m == 0 && n > 0 && k > 0) return Status::Ok();  // no rows: y[0, n] has nothing to write, as on the CPU
  if (!handle_) return Status::Internal("cublas matmul: the handle is not initialised");
  const std::string shapes = "x[" + std::to_string(m) + ", " + std::to_string(k) + "] w[" + std::to_string(n) +
                             ", " + std::to_string(k) + "]";
  constexpr int64_t kMax = 0x7fffffff;
  if (m <= 0 || n <= 0 || k <= 0 || m > kMax || n > kMax || k > kMax)
    return Status::InvalidArgument("cublas matmul: shapes out of range: " + shapes);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType_t ab = elem == Elem::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  // f32: the pedantic compute type, so no reduced-precision path is ever taken.
  const cublasComputeType_t compute = elem == Elem::kBF16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const int in = static_cast<int>(n), im = static_cast<int>(m), ik = static_cast<int>(k);
  return cublas_status(cublas_api().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w, ab, ik, x, ab,
                                            ik, &beta, y, CUDA_R_32F, in, compute, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx", shapes);
}

Status cublas_version(int* version) {
  const CublasApi& api = cublas_api();
  if (!api.error.empty()) return Status::Unsupported("cublas: " + api.error);
  cublasHandle_t h = nullptr;
  DZ_RETURN_IF_ERROR(cublas_status(api.create(&h), "cublasCreate"));
  const Status s = cublas_status(api.get_version(h, version), "cublasGetVersion");
  api.destroy(h);
  return s;
}

}  // namespace dayzero::kernels::cuda
