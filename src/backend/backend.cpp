// Backend factory: the one place that knows which backends are built.
#include "backend/backend.h"

#include "core/check.h"

namespace dayzero::backend {

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options);
#ifdef DAYZERO_WITH_CUDA
Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options);
bool cuda_built() { return true; }
#else
Result<int> cuda_device_count() { return 0; }
bool cuda_built() { return false; }
#endif

Tensor Backend::to_device_fp8_weight(const Fp8WeightSlice& w) {
  (void)w;
  DZ_CHECK(false, "backend " << name() << " keeps no FP8 weights (keeps_fp8_weights() is false)");
  return {};
}

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  if (options.kind == "cpu") return make_cpu_backend(options);
  if (options.kind == "cuda") {
#ifdef DAYZERO_WITH_CUDA
    return make_cuda_backend(options);
#else
    return Status::Unsupported("backend 'cuda' was not built into this dayzero (configure with DAYZERO_CUDA=ON)");
#endif
  }
  return Status::InvalidArgument("unknown backend '" + options.kind + "' (expected cpu or cuda)");
}

}  // namespace dayzero::backend
