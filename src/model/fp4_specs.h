// Declares the FP4 Linears of a tensor list (compressed-tensors mxfp4- / nvfp4-pack-quantized:
// the formats are rows of core/stored_format.h, the layout checkpoint/fp4.h): which weights the
// quantization_config quantizes and the stored companions each one brings. dayzero keeps FP4
// for routed experts, the weights published checkpoints ship in it; a config that quantizes any
// other Linear is refused. The forward pass sees only the logical weights.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/fp4.h"
#include "core/status.h"
#include "model/tensor_spec.h"

namespace dayzero::model {

// Every routed-expert Linear weight of specs (2-D `<module>.weight`, component kRoutedExpert)
// whose module quant.quantizes() becomes FP4 (spec.stored: the format's row, kCompanions), and its
// weight_packed U8 [out, ceil(in / 2)], weight_scale [out, ceil(in / g)] and, NVFP4,
// weight_global_scale F32 [1] are appended (component kQuantScale, skip_load, the weight's
// layer, stored.format set). Errors: Unsupported naming the first other Linear (attention, dense or shared
// MLP, router, lm_head) that quant quantizes. Skipped specs (multi-token prediction) are left
// as they are.
Status apply_fp4_quant(std::vector<TensorSpec>& specs, const checkpoint::Fp4Quant& quant);

// The modules of every Linear weight of specs that is not a routed expert: the ignore list of a
// quantization_config that stores the routed experts only (make-model).
std::vector<std::string> fp4_ignore_list(const std::vector<TensorSpec>& specs);

// DeepSeek-V4's routed experts published in MXFP4 (quantization_config expert_dtype fp4): every
// routed-expert Linear weight of specs becomes MXFP4 in place (kOwnName) and its
// `<module>.scale` [out, ceil(in / 32)] is appended (kQuantScale, skip_load, stored.format set).
void apply_in_place_fp4_experts(std::vector<TensorSpec>& specs);

}  // namespace dayzero::model
