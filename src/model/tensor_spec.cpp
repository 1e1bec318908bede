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
