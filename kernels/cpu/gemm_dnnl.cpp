// The oneDNN GEMM path: dnnl_sgemm (row-major, w read transposed in place) from libdnnl,
// dlopen()ed (RTLD_LOCAL) like the BLAS libraries. Run by DAYZERO_GEMM=onednn and measured by
// gemm_bench; no longer in the default rule: at M <= 16 the built-in small-M tiles beat it, at
// large M OpenBLAS does (docs/gemm.md).
// Debian's build runs on an OpenMP (libgomp) team; libgomp reads OMP_WAIT_POLICY once, when it
// loads, so the library is loaded here with the policy set to passive unless the user chose:
// a team that spins between calls takes the core from the next op (docs/gemm.md).
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "core/check.h"
#include "kernels/cpu/gemm.h"

namespace dayzero::kernels::cpu::gemm {
namespace {

// oneDNN 2.x C ABI: dnnl_status_t is an int enum (0 = success), dnnl_dim_t is int64_t.
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                        float, float*, int64_t);
using VersionFn = const DnnlVersion* (*)();
using SetThreadsFn = void (*)(int);

class Dnnl final : public GemmPath {
 public:
  bool load(std::string* why) {
    setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
    for (const char* lib : {"libdnnl.so.2", "libdnnl.so"}) {
      handle_ = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (handle_) break;
    }
    if (!handle_) {
      *why = std::string("cannot load libdnnl: ") + dlerror();
      return false;
    }
    sgemm_ = reinterpret_cast<SgemmFn>(dlsym(handle_, "dnnl_sgemm"));
    auto version = reinterpret_cast<VersionFn>(dlsym(handle_, "dnnl_version"));
    // oneDNN takes its thread count from the calling thread's OpenMP setting.
    set_threads_ = reinterpret_cast<SetThreadsFn>(dlsym(handle_, "omp_set_num_threads"));
    if (!sgemm_ || !version || !set_threads_) {
      *why = "libdnnl lacks dnnl_sgemm/dnnl_version, or no omp_set_num_threads";
      return false;
    }
    const DnnlVersion* v = version();
    name_ = "onednn " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    return true;
  }
  std::string name() const override { return name_; }
  void set_threads(int n) override { set_threads_(n); }
  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    const int st = sgemm_('N', 'T', m, n, k, 1.0f, x, k, w, k, beta, y, n);
    DZ_CHECK(st == 0, "dnnl_sgemm " << m << "x" << n << "x" << k << " returned status " << st);
  }

 private:
  void* handle_ = nullptr;
  SgemmFn sgemm_ = nullptr;
  SetThreadsFn set_threads_ = nullptr;
  std::string name_;
};

}  // namespace

GemmPath* onednn(std::string* why) {
  static std::string load_error;
  static Dnnl* lib = [] {
    auto* impl = new Dnnl;
    if (impl->load(&load_error)) return impl;
    delete impl;
    return static_cast<Dnnl*>(nullptr);
  }();
  if (!lib && why) *why = load_error;
  return lib;
}

}  // namespace dayzero::kernels::cpu::gemm
