// The OpenBLAS GEMM path: dlopen()s the system libopenblas (RTLD_LOCAL) and calls
// cblas_sgemm / cblas_sgemv. Also re-runs the library's core selection when the rule in
// gemm_select.cpp says its own detection fell back to a narrower core than the CPU has.
// Not the selection rule itself (gemm_select.cpp) and not linked: see gemm.h for why.
#include <dlfcn.h>
#include <strings.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "core/check.h"
#include "kernels/cpu/gemm.h"

namespace dayzero::kernels::cpu::gemm {
namespace {

// CBLAS enumerators, passed as int (the C ABI of an enum argument).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);
using SgemvFn = void (*)(int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using SetThreadsFn = void (*)(int);
using StringFn = char* (*)();
using VoidFn = void (*)();

class OpenBlasImpl final : public OpenBlas {
 public:
  bool load(std::string* why) {
    std::string errors;
    // The pthreads build's idle workers spin in sched_yield for 2^28 cycles (~0.1 s) after each
    // call, taking the core from dayzero's own kernel threads and from the other libraries;
    // 2^4 cycles lets them sleep at once (docs/gemm.md, "One thread pool"). Read by the
    // library when it loads; the user's own setting is kept.
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0);
    const char* candidates[] = {"libopenblas.so.0", "libopenblas.so",
#ifdef DAYZERO_OPENBLAS_LIBDIR
                                DAYZERO_OPENBLAS_LIBDIR "/libopenblas.so.0",
#endif
    };
    for (const char* name : candidates) {
      handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) break;
      errors += std::string(errors.empty() ? "" : "; ") + dlerror();
    }
    if (handle_ == nullptr) {
      *why = "cannot load libopenblas: " + errors;
      return false;
    }
    sgemm_ = reinterpret_cast<SgemmFn>(dlsym(handle_, "cblas_sgemm"));
    sgemv_ = reinterpret_cast<SgemvFn>(dlsym(handle_, "cblas_sgemv"));
    set_threads_ = reinterpret_cast<SetThreadsFn>(dlsym(handle_, "openblas_set_num_threads"));
    corename_ = reinterpret_cast<StringFn>(dlsym(handle_, "openblas_get_corename"));
    config_ = reinterpret_cast<StringFn>(dlsym(handle_, "openblas_get_config"));
    auto parallel = reinterpret_cast<int (*)()>(dlsym(handle_, "openblas_get_parallel"));
    // Present in DYNAMIC_ARCH builds only; without them the core cannot be changed.
    dynamic_quit_ = reinterpret_cast<VoidFn>(dlsym(handle_, "gotoblas_dynamic_quit"));
    dynamic_init_ = reinterpret_cast<VoidFn>(dlsym(handle_, "gotoblas_dynamic_init"));
    if (!sgemm_ || !sgemv_ || !set_threads_ || !corename_ || !config_) {
      *why = "libopenblas lacks cblas_sgemm/cblas_sgemv/openblas_* symbols";
      return false;
    }
    detected_core_ = core();
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "0.3.21"
    std::istringstream config(config_());
    std::string word;
    config >> word >> version_;
    // 0 sequential, 1 pthreads, 2 OpenMP
    const int model = parallel ? parallel() : -1;
    threading_ = model == 2 ? "openmp" : model == 1 ? "pthreads" : model == 0 ? "sequential" : "threading unknown";
    return true;
  }

  std::string name() const override { return "openblas " + version_ + " " + core() + " " + threading_; }
  std::string version() const override { return version_; }
  std::string core() const override { return corename_(); }
  std::string detected_core() const override { return detected_core_; }

  bool force_core(const std::string& want, std::string* why) override {
    if (!dynamic_quit_ || !dynamic_init_) {
      *why = "this OpenBLAS is not a DYNAMIC_ARCH build; its core is fixed";
      return false;
    }
    {
      // The library reads OPENBLAS_CORETYPE only inside gotoblas_dynamic_init(); set it for
      // that call alone and put back whatever the user had.
      static std::mutex env_mutex;
      std::lock_guard<std::mutex> lock(env_mutex);
      const char* prev = std::getenv("OPENBLAS_CORETYPE");
      const std::string saved = prev ? prev : "";
      setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
      dynamic_quit_();
      dynamic_init_();
      if (prev) {
        setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
      } else {
        unsetenv("OPENBLAS_CORETYPE");
      }
    }
    if (strcasecmp(core().c_str(), want.c_str()) != 0) {
      *why = "asked OpenBLAS for core " + want + ", it runs " + core();
      return false;
    }
    return true;
  }

  void set_threads(int n) override { set_threads_(n); }

  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    DZ_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "CBLAS takes int dimensions: " << m << "x" << n
                                                                                            << "x" << k);
    // OpenBLAS 0.3.21's sgemm packs even a single row; its sgemv is 3-6x faster at m = 1.
    if (m == 1) {
      sgemv_(kRowMajor, kNoTrans, int(n), int(k), 1.0f, w, int(k), x, 1, beta, y, 1);
    } else {
      sgemm_(kRowMajor, kNoTrans, kTrans, int(m), int(n), int(k), 1.0f, x, int(k), w, int(k), beta, y, int(n));
    }
  }

 private:
  void* handle_ = nullptr;
  SgemmFn sgemm_ = nullptr;
  SgemvFn sgemv_ = nullptr;
  SetThreadsFn set_threads_ = nullptr;
  StringFn corename_ = nullptr;
  StringFn config_ = nullptr;
  VoidFn dynamic_quit_ = nullptr;
  VoidFn dynamic_init_ = nullptr;
  std::string detected_core_;
  std::string version_;
  std::string threading_;
};

}  // namespace

OpenBlas* OpenBlas::get(std::string* why) {
  // Loaded once; never unloaded (its thread pool would outlive the code).
  static std::string load_error;
  static OpenBlasImpl* lib = [] {
    auto* impl = new OpenBlasImpl;
    if (impl->load(&load_error)) return impl;
    delete impl;
    return static_cast<OpenBlasImpl*>(nullptr);
  }();
  if (!lib && why) *why = load_error;
  return lib;
}

}  // namespace dayzero::kernels::cpu::gemm
