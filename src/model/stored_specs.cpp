// Tensor names of quantized weight specs (stored_specs.h).
#include "model/stored_specs.h"

#include "core/check.h"

namespace dayzero::model {

std::string stored_module(const TensorSpec& spec) {
  static const std::string kSuffix = ".weight";
  DZ_CHECK(is_stored_weight(spec) && spec.name.size() > kSuffix.size() &&
               spec.name.compare(spec.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0,
           spec.name << " is not a quantized weight kept as stored");
  return spec.name.substr(0, spec.name.size() - kSuffix.size());
}

checkpoint::StoredLayout stored_layout(const TensorSpec& spec) {
  DZ_CHECK(is_stored_weight(spec), spec.name << " is not a quantized weight kept as stored");
  const StoredSpec& s = spec.stored;
  if (s.placement == StoredPlacement::kCompanions)
    return checkpoint::compressed_tensors_layout(stored_module(spec), *s.format, s.block_cols);
  return checkpoint::own_name_layout(spec.name, s.scale, *s.format, s.block_rows, s.block_cols);
}

std::string stored_scale_name(const TensorSpec& spec) { return stored_layout(spec).scale; }

DType checkpoint_dtype(const TensorSpec& spec, const checkpoint::Catalog& catalog) {
  const checkpoint::TensorInfo* t =
      catalog.find(is_stored_weight(spec, StoredScheme::kInt4Group) ? stored_scale_name(spec) : spec.name);
  return t ? t->dtype : DType::kF32;
}

}  // namespace dayzero::model
