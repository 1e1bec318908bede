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

namespace {
// An FP4 companion's part by its name's ending: 0 codes, 1 scales, 2 the global scale.
int fp4_part(const TensorSpec& s) {
  const auto ends = [&](const std::string& x) {
    return s.name.size() >= x.size() && s.name.compare(s.name.size() - x.size(), x.size(), x) == 0;
  };
  return ends(".weight_packed") ? 0 : ends(".weight_scale") || ends(".scale") ? 1 : 2;  // .scale: DeepSeek-V4's
}
// A stored companion of an FP4 weight: its codes, scales or global scale.
bool is_fp4_companion(const TensorSpec& s) {
  return s.component == Component::kQuantScale && s.stored.format && is_fp4(s.stored.format->scheme);
}
// A quantized weight whose 4-bit codes are under its own name (two a byte).
bool codes_in_place(const TensorSpec& s) {
  return is_stored_weight(s) && s.stored.placement == StoredPlacement::kOwnName && s.stored.format->value_bits == 4;
}

}  // namespace

std::optional<Shape> on_disk_shape(const TensorSpec& s) {
  if (is_stored_weight(s) && s.stored.placement == StoredPlacement::kCompanions) return std::nullopt;
  if (codes_in_place(s) && s.shape.size() == 2) return Shape{s.shape[0], (s.shape[1] + 1) / 2};
  return s.shape;
}

bool stored_dtype_fits(const TensorSpec& s, DType t) {
  if (s.index_range > 0) return t == DType::kI32 || t == DType::kI64;
  if (codes_in_place(s)) return t == DType::kU8 || t == DType::kI8;
  if (is_fp4_companion(s)) {  // checkpoint/fp4.h's layout
    switch (fp4_part(s)) {
      case 0: return t == DType::kU8 || t == DType::kI8;
      case 1: return s.stored.format->scale == ScaleKind::kE4M3 ? t == DType::kF8_E4M3 : t == DType::kU8 || t == DType::kF8_E8M0;
      default: return t == DType::kF32;
    }
  }
  return s.component == Component::kQuantScale || dtype_is_float(t);
}

const char* expected_dtype(const TensorSpec& s) {
  if (codes_in_place(s)) return "U8 or I8 (two E2M1 codes a byte)";
  if (is_fp4_companion(s)) {
    switch (fp4_part(s)) {
      case 0: return "U8 or I8 (two E2M1 codes a byte)";
      case 1: return s.stored.format->scale == ScaleKind::kE4M3 ? "F8_E4M3 (NVFP4 scales)" : "U8 or F8_E8M0 (MXFP4 scales)";
      default: return "F32 (the NVFP4 global scale)";
    }
  }
  return s.index_range > 0 ? "I32 or I64" : "a float type";
}

void set_component(std::vector<TensorSpec>& specs, size_t from, Component c) {
  for (size_t i = from; i < specs.size(); ++i) specs[i].component = c;
}

void prefix_tensor_names(std::vector<TensorSpec>& specs, const std::string& prefix) {
  for (TensorSpec& t : specs) {
    t.name = prefix + t.name;
    if (!t.stored.scale.empty()) t.stored.scale = prefix + t.stored.scale;
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
