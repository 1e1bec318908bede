// RMSNorm weights as a family applies them: w itself (Llama), or 1 + w where the family stores
// the offset from one (Gemma-style; qwen3_next, hp.norm_weight_offset). The one place that
// knows the difference: blocks and the forward pass's final norm take their weights from here.
#pragma once

#include "backend/backend.h"
#include "model/hparams.h"

namespace dayzero::model::blocks {

// The weight rmsnorm multiplies by: w, or a new device tensor 1 + w when hp.norm_weight_offset.
Tensor rms_weight(backend::Backend& be, const HParams& hp, const Tensor& w);
// y = rmsnorm(x) * rms_weight(w) over the last dimension. x and y may be the same tensor.
void rms_norm(backend::Backend& be, const HParams& hp, const Tensor& x, const Tensor& w, Tensor& y);

}  // namespace dayzero::model::blocks
