// Where the checkpoint keeps a quantized weight spec's tensors (TensorSpec::stored), as the one
// reader of weights kept as stored takes it (checkpoint/stored.h): the one step from the spec's
// placement to tensor names, whatever the format.
#pragma once

#include <string>

#include "checkpoint/stored.h"
#include "model/tensor_spec.h"

namespace dayzero::model {

// The module of a quantized weight spec ("<module>.weight"). REQUIRES: is_stored_weight(spec).
std::string stored_module(const TensorSpec& spec);
// Its tensors: under its own name with spec.stored.scale, or compressed-tensors' companions of
// its module. REQUIRES: is_stored_weight(spec).
checkpoint::StoredLayout stored_layout(const TensorSpec& spec);
// The name of its scales (whose dtype says how an INT4 weight's are kept: plan::kept_dtype).
// REQUIRES: is_stored_weight(spec).
std::string stored_scale_name(const TensorSpec& spec);
// The stored dtype plan::kept_dtype takes for spec: its checkpoint tensor's, or for an INT4
// weight (never on disk under its name) its group scales'; F32 when the catalog has neither.
DType checkpoint_dtype(const TensorSpec& spec, const checkpoint::Catalog& catalog);

}  // namespace dayzero::model
