// FP4 Linears in a tensor list (fp4_specs.h).
#include "model/fp4_specs.h"

#include "core/check.h"

namespace dayzero::model {

namespace {
const std::string kFp4WeightSuffix = ".weight";

bool is_quantizable_linear(const TensorSpec& s) {
  if (s.skip_load || s.shape.size() != 2 || s.name.size() <= kFp4WeightSuffix.size() ||
      s.name.compare(s.name.size() - kFp4WeightSuffix.size(), kFp4WeightSuffix.size(), kFp4WeightSuffix) != 0)
    return false;
  const Component c = s.component;
  return c == Component::kAttention || c == Component::kMlp || c == Component::kRoutedExpert ||
         c == Component::kSharedExpert || c == Component::kRouter || c == Component::kLmHead;
}
}  // namespace

Status apply_fp4_quant(std::vector<TensorSpec>& specs, const checkpoint::Fp4Quant& quant) {
  const StoredFormat* f = &stored_format(quant.scheme);
  std::vector<TensorSpec> companions;
  for (TensorSpec& s : specs) {
    if (!is_quantizable_linear(s)) continue;
    const std::string module = s.name.substr(0, s.name.size() - kFp4WeightSuffix.size());
    if (!quant.quantizes(module)) continue;
    if (s.component != Component::kRoutedExpert)
      return Status::Unsupported(std::string("config.json: quantization_config quantizes ") + module + " (" +
                                 component_name(s.component) + ") to " + f->name +
                                 "; dayzero keeps FP4 for routed experts only (add it to the ignore list)");
    s.stored = {f, 1, f->block_cols, StoredPlacement::kCompanions};
    const int64_t out = s.shape[0], in = s.shape[1];
    std::vector<std::pair<std::string, Shape>> parts = {{module + ".weight_packed", Shape{out, (in + 1) / 2}},
                                                        {module + ".weight_scale", Shape{out, (in + f->block_cols - 1) / f->block_cols}}};
    if (f->global_scale_bytes) parts.push_back({module + ".weight_global_scale", Shape{1}});
    for (auto& [name, shape] : parts) {
      TensorSpec t{name, shape, ShardRule::kReplicated, s.layer};
      t.skip_load = true;
      t.component = Component::kQuantScale;
      t.stored.format = f;
      companions.push_back(std::move(t));
    }
  }
  for (auto& t : companions) specs.push_back(std::move(t));
  return Status::Ok();
}

std::vector<std::string> fp4_ignore_list(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> out;
  for (const TensorSpec& s : specs)
    if (is_quantizable_linear(s) && s.component != Component::kRoutedExpert)
      out.push_back(s.name.substr(0, s.name.size() - kFp4WeightSuffix.size()));
  return out;
}

void apply_in_place_fp4_experts(std::vector<TensorSpec>& specs) {
  const StoredFormat* f = &stored_format(StoredScheme::kMxfp4);
  std::vector<TensorSpec> scales;
  for (TensorSpec& s : specs) {
    // Every routed expert, the multi-token-prediction layers' too (declared, never loaded).
    if (s.component != Component::kRoutedExpert || s.shape.size() != 2 || s.name.size() <= kFp4WeightSuffix.size() ||
        s.name.compare(s.name.size() - kFp4WeightSuffix.size(), kFp4WeightSuffix.size(), kFp4WeightSuffix) != 0)
      continue;
    const std::string module = s.name.substr(0, s.name.size() - kFp4WeightSuffix.size());
    s.stored = {f, 1, f->block_cols, StoredPlacement::kOwnName, module + ".scale"};
    TensorSpec t{s.stored.scale, {s.shape[0], (s.shape[1] + f->block_cols - 1) / f->block_cols}, ShardRule::kReplicated,
                 s.layer};
    t.skip_load = true;
    t.component = Component::kQuantScale;
    t.stored.format = f;
    scales.push_back(std::move(t));
  }
  for (auto& t : scales) specs.push_back(std::move(t));
}

}  // namespace dayzero::model
