// The GEMM workspace bounds (backend/gemm_workspace.h) that a CUDA backend will reach with the
// weights the loader places on this rank, computed before any is loaded from the specs, the
// rank's slices and the loader's rule for what is kept (plan::kept_dtype, as load_weights
// applies it for a backend that keeps block-scaled FP8), so that the plan check counts them.
// Not the allocation (cuda_backend.cpp) nor the plan's own memory model (plan/memory.h).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "backend/gemm_workspace.h"
#include "model/tensor_spec.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"

namespace dayzero::runtime {

// stored_of: a spec's stored dtype as load_weights reads it (a pack-quantized weight's: its
// group scales'). weights: run config model.weights_on_device (absent: the backend's own rule,
// bf16 for matrices under bf16 compute, f32 otherwise). compute: kBF16 or kF32. max_tokens: the
// rows of the largest forward (Reservation::max_tokens).
backend::GemmWorkspaceBounds::Bytes planned_gemm_workspaces(
    const std::vector<model::TensorSpec>& specs, const SliceFn& slice_of,
    const std::function<DType(const model::TensorSpec&)>& stored_of, std::optional<plan::WeightsOnDevice> weights,
    DType compute, int64_t max_tokens);

}  // namespace dayzero::runtime
