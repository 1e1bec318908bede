// The BLIS GEMM path: dlopen()s libblis (RTLD_LOCAL) and calls its typed API bli_sgemm /
// bli_sgemv, which take row and column strides, so w[n, k] is read as k x n without a copy.
// Not its CBLAS layer: that calls sgemm_, which would bind to OpenBLAS's when both are loaded.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/gemm.h"

namespace dayzero::kernels::cpu::gemm {
namespace {

// BLIS 0.9 types on LP64: dim_t = inc_t = int64_t, trans_t/conj_t/arch_t are int enums.
constexpr int kBlisNoTranspose = 0, kBlisNoConjugate = 0;
using BliSgemmFn = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                            const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
using BliSgemvFn = void (*)(int, int, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                            const float*, int64_t, const float*, float*, int64_t);
using BliSetThreadsFn = void (*)(int64_t);
using BliVersionFn = const char* (*)();
using BliArchIdFn = int (*)();
using BliArchStringFn = const char* (*)(int);

class Blis final : public GemmPath {
 public:
  bool load(std::string* why) {
    // Debian's libblis4 may be the OpenMP build: its libgomp team must sleep between calls,
    // as oneDNN's does (gemm_dnnl.cpp; libgomp reads the policy once, when it loads).
    setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
    for (const char* lib : {"libblis.so.4", "libblis.so"}) {
      handle_ = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (handle_) break;
    }
    if (!handle_) {
      *why = std::string("cannot load libblis: ") + dlerror();
      return false;
    }
    sgemm_ = reinterpret_cast<BliSgemmFn>(dlsym(handle_, "bli_sgemm"));
    sgemv_ = reinterpret_cast<BliSgemvFn>(dlsym(handle_, "bli_sgemv"));
    set_threads_ = reinterpret_cast<BliSetThreadsFn>(dlsym(handle_, "bli_thread_set_num_threads"));
    auto version = reinterpret_cast<BliVersionFn>(dlsym(handle_, "bli_info_get_version_str"));
    auto arch_id = reinterpret_cast<BliArchIdFn>(dlsym(handle_, "bli_arch_query_id"));
    auto arch_string = reinterpret_cast<BliArchStringFn>(dlsym(handle_, "bli_arch_string"));
    if (!sgemm_ || !sgemv_ || !set_threads_ || !version || !arch_id || !arch_string) {
      *why = "libblis lacks the bli_sgemm/bli_sgemv/bli_thread_set_num_threads symbols";
      return false;
    }
    name_ = std::string("blis ") + version() + " " + arch_string(arch_id());
    return true;
  }

  std::string name() const override { return name_; }
  void set_threads(int n) override { set_threads_(n); }

  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    const float one = 1.0f;
    if (m == 1) {
      // y[n] = w[n, k] · x[k]: w with row stride k, column stride 1.
      sgemv_(kBlisNoTranspose, kBlisNoConjugate, n, k, &one, w, k, 1, x, 1, &beta, y, 1);
    } else {
      // B = w^T is k x n with row stride 1 and column stride k.
      sgemm_(kBlisNoTranspose, kBlisNoTranspose, m, n, k, &one, x, k, 1, w, 1, k, &beta, y, n, 1);
    }
  }

 private:
  void* handle_ = nullptr;
  BliSgemmFn sgemm_ = nullptr;
  BliSgemvFn sgemv_ = nullptr;
  BliSetThreadsFn set_threads_ = nullptr;
  std::string name_;
};

}  // namespace

GemmPath* blis(std::string* why) {
  static std::string load_error;
  static Blis* lib = [] {
    auto* impl = new Blis;
    if (impl->load(&load_error)) return impl;
    delete impl;
    return static_cast<Blis*>(nullptr);
  }();
  if (!lib && why) *why = load_error;
  return lib;
}

}  // namespace dayzero::kernels::cpu::gemm
