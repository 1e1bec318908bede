// Pack-quantized INT4 Linears in a tensor list (pack_quant_specs.h).
#include "model/pack_quant_specs.h"

#include "core/check.h"

namespace dayzero::model {

void apply_pack_quant(std::vector<TensorSpec>& specs, const checkpoint::PackQuant& quant, const std::string& prefix) {
  const std::string suffix = ".weight";
  std::vector<TensorSpec> companions;
  for (TensorSpec& s : specs) {
    if (s.skip_load || s.shape.size() != 2 || s.name.size() <= suffix.size() ||
        s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const Component c = s.component;
    if (c != Component::kAttention && c != Component::kMlp && c != Component::kRoutedExpert &&
        c != Component::kSharedExpert && c != Component::kLmHead)
      continue;
    const std::string module = s.name.substr(0, s.name.size() - suffix.size());
    const std::string local = module.rfind(prefix, 0) == 0 ? module.substr(prefix.size()) : module;
    if (!quant.quantizes(local)) continue;
    s.stored = {&stored_format(StoredScheme::kInt4Group), 1, quant.group_size, StoredPlacement::kCompanions};
    const int64_t out = s.shape[0], in = s.shape[1];
    for (auto [name, shape] : {std::pair{checkpoint::packed_name(module), Shape{out, quant.words(in)}},
                               std::pair{checkpoint::group_scale_name(module), Shape{out, quant.groups(in)}},
                               std::pair{checkpoint::weight_shape_name(module), Shape{2}}}) {
      TensorSpec t{name, shape, ShardRule::kReplicated, s.layer};
      t.skip_load = true;
      t.component = Component::kQuantScale;
      companions.push_back(std::move(t));
    }
  }
  for (auto& t : companions) specs.push_back(std::move(t));
}

}  // namespace dayzero::model
