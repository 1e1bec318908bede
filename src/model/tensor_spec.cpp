// Tensor-name templates and shard rule names.
#include "model/tensor_spec.h"

namespace dayzero::model {

const char* shard_rule_name(ShardRule r) {
  switch (r) {
    case ShardRule::kReplicated: return "replicated";
    case ShardRule::kSplitDim0: return "split_dim0";
    case ShardRule::kSplitDim1: return "split_dim1";
    case ShardRule::kExpertOwned: return "expert_owned";
    case ShardRule::kVocabSplit: return "vocab_split";
  }
  return "?";
}

const char* component_name(Component c) {
  switch (c) {
    case Component::kUnknown: return "unknown";
    case Component::kEmbedding: return "embedding";
    case Component::kAttention: return "attention";
    case Component::kMlp: return "dense_mlp";
    case Component::kRoutedExpert: return "routed_experts";
    case Component::kSharedExpert: return "shared_experts";
    case Component::kRouter: return "router";
    case Component::kNorm: return "norms";
    case Component::kLmHead: return "lm_head";
    case Component::kVision: return "vision";
    case Component::kProjector: return "projector";
    case Component::kMtpHead: return "mtp_head";
    case Component::kQuantScale: return "quant_scale";
  }
  return "?";
}

bool stored_dtype_fits(const TensorSpec& s, DType t) {
  if (s.index_range > 0) return t == DType::kI32 || t == DType::kI64;
  return s.component == Component::kQuantScale || dtype_is_float(t);
}

const char* expected_dtype(const TensorSpec& s) { return s.index_range > 0 ? "I32 or I64" : "a float type"; }

void set_component(std::vector<TensorSpec>& specs, size_t from, Component c) {
  for (size_t i = from; i < specs.size(); ++i) specs[i].component = c;
}

void prefix_tensor_names(std::vector<TensorSpec>& specs, const std::string& prefix) {
  for (TensorSpec& t : specs) {
    t.name = prefix + t.name;
    if (!t.scale_name.empty()) t.scale_name = prefix + t.scale_name;
  }
}

std::string layer_tensor_name(const std::string& tmpl, int layer) {
  std::string out = tmpl;
  const auto pos = out.find("{L}");
  if (pos != std::string::npos) out.replace(pos, 3, std::to_string(layer));
  return out;
}

std::string expert_tensor_name(const std::string& tmpl, int layer, int expert) {
  std::string out = layer_tensor_name(tmpl, layer);
  const auto pos = out.find("{E}");
  if (pos != std::string::npos) out.replace(pos, 3, std::to_string(expert));
  return out;
}

}  // namespace dayzero::model
