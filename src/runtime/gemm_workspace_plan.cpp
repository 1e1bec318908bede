// The GEMM workspace bounds of a CUDA rank before its load (gemm_workspace_plan.h).
#include "runtime/gemm_workspace_plan.h"

namespace dayzero::runtime {

backend::GemmWorkspaceBounds::Bytes planned_gemm_workspaces(
    const std::vector<model::TensorSpec>& specs, const SliceFn& slice_of,
    const std::function<DType(const model::TensorSpec&)>& stored_of, std::optional<plan::WeightsOnDevice> weights,
    DType compute, int64_t max_tokens) {
  backend::GemmWorkspaceBounds b(compute);
  for (const auto& spec : specs) {
    if (spec.skip_load || spec.shape.size() < 2) continue;
    const TensorSlice sl = slice_of ? slice_of(spec) : TensorSlice{};
    if (!sl.held) continue;
    Shape shape(spec.shape.begin(), spec.shape.end());
    if (!sl.rows.empty()) {
      int64_t rows = 0;
      for (const auto& [a, e] : sl.rows) rows += e - a;
      shape[0] = rows;
    } else if (sl.dim >= 0 && sl.dim < static_cast<int>(shape.size())) {
      shape[static_cast<size_t>(sl.dim)] = sl.end - sl.begin;
    }
    if (!weights) {  // the backend's own rule (CudaBackend::to_device_weight(host))
      b.note_weight(shape, compute == DType::kBF16 ? DType::kBF16 : DType::kF32);
      continue;
    }
    const DType stored = stored_of(spec);
    const DType kept = plan::kept_dtype(spec, stored, *weights, plan::kCudaKeepsQuantized);
    if (kept == DType::kI4) continue;  // no device form: the run refuses it before loading
    if (model::is_stored_weight(spec) && is_stored_weight_dtype(kept) && shape.size() == 2) {
      b.note_stored(shape[0], shape[1]);  // kept as stored, dequantised per GEMM
      continue;
    }
    b.note_weight(shape, kept == DType::kF32 ? DType::kF32 : DType::kBF16);
  }
  return b.bounds(max_tokens);
}

}  // namespace dayzero::runtime
