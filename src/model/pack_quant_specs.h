// Declares the pack-quantized INT4 Linears of a tensor list (compressed-tensors: the format is
// checkpoint/pack_quantized.h): which weights the quantization_config quantizes, and the
// stored companions each one brings. The forward pass sees only the logical weights.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/pack_quantized.h"
#include "model/tensor_spec.h"

namespace dayzero::model {

// Every Linear weight of specs (2-D `<module>.weight` of attention, dense MLP, routed or shared
// experts, or lm_head; never the router, norms or embedding) whose module quant.quantizes()
// becomes pack-quantized (spec.stored: the int4-pack row in its groups, kCompanions), and its weight_packed [out, words(in)], weight_scale
// [out, groups(in)] and weight_shape [2] are appended (component kQuantScale, skip_load, the
// weight's layer). `prefix` is stripped from names before the ignore list is matched (the
// quantization_config of a text_config names the text model's modules). Skipped specs
// (multi-token prediction) are left as they are.
void apply_pack_quant(std::vector<TensorSpec>& specs, const checkpoint::PackQuant& quant,
                      const std::string& prefix = "");

}  // namespace dayzero::model
