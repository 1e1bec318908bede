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
Result<std::string> cuda_pci_bus_id(int) { return Status::Unsupported("CUDA is not built into this dayzero"); }
bool cuda_built() { return false; }
#endif

Tensor Backend::to_device_stored(const StoredWeightSlice& w) {
  DZ_CHECK(false, "backend " << name() << " keeps no " << (w.slice.format ? w.slice.format->name : "quantized")
                              << " weights as stored (keeps_stored() is false)");
  return {};
}

void check_route_args(const Tensor& logits, const Tensor* bias, const RouterOptions& o, const Tensor& ids,
                      const Tensor& weights) {
  DZ_CHECK(logits.rank() == 2 && logits.dtype() == DType::kF32, "route_topk: logits " << shape_str(logits.shape()));
  const int64_t n = logits.dim(0), ne = logits.dim(1);
  DZ_CHECK(o.k >= 1 && o.k <= ne, "route_topk: k " << o.k << " of " << ne << " experts");
  DZ_CHECK(ids.dtype() == DType::kI32 && ids.numel() == n * o.k && weights.dtype() == DType::kF32 &&
               weights.numel() == n * o.k,
           "route_topk: ids " << shape_str(ids.shape()) << " weights " << shape_str(weights.shape()) << " for "
                              << n << " tokens, k " << o.k);
  if (o.kind == RouterOptions::Kind::kSoftmax) {
    DZ_CHECK(!bias, "route_topk: the softmax router takes no bias");
    return;
  }
  DZ_CHECK(o.n_group >= 1 && ne % o.n_group == 0 && o.topk_group >= 1 && o.topk_group <= o.n_group &&
               o.k <= o.topk_group * (ne / o.n_group),
           "route_topk: " << ne << " experts in " << o.n_group << " groups, " << o.topk_group << " kept, k " << o.k);
  DZ_CHECK(!bias || bias->numel() == ne, "route_topk: bias " << shape_str(bias->shape()) << " for " << ne << " experts");
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
