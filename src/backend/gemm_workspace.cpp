// The GEMM workspace bounds of a device backend (gemm_workspace.h).
#include "backend/gemm_workspace.h"

#include <algorithm>

namespace dayzero::backend {

void GemmWorkspaceBounds::note_weight(const Shape& shape, DType kept) {
  if (shape.size() < 2 || shape[0] <= 0) return;
  const int64_t numel = shape_numel(shape), in = numel / shape[0];
  if (kept == DType::kBF16 && compute_ == DType::kF32) max_convert_elems_ = std::max(max_convert_elems_, numel);
  // An f32 weight runs the f32 GEMM (x stays f32); a bf16 one under bf16 compute rounds x.
  if (kept == DType::kBF16 && compute_ == DType::kBF16) max_bf16_in_ = std::max(max_bf16_in_, in);
}

void GemmWorkspaceBounds::note_stored(int64_t rows, int64_t cols) {
  max_convert_elems_ = std::max(max_convert_elems_, rows * cols);
  if (compute_ == DType::kBF16) max_bf16_in_ = std::max(max_bf16_in_, cols);
}

GemmWorkspaceBounds::Bytes GemmWorkspaceBounds::bounds(int64_t max_tokens) const {
  const int64_t ge = compute_ == DType::kBF16 ? 2 : 4;
  Bytes b;
  b.weight = max_convert_elems_ * ge;
  if (compute_ == DType::kBF16) b.activation = std::max<int64_t>(0, max_tokens) * max_bf16_in_ * 2;
  return b;
}

}  // namespace dayzero::backend
