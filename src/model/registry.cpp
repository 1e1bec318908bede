// The explicit table of adapters (static self-registration gets dropped by the linker).
#include "model/registry.h"

#include "core/json.h"
#include "model/adapters/adapters.h"

namespace dayzero::model {
namespace {

const std::vector<const Adapter*>& table() {
  static const std::vector<const Adapter*> kAdapters = {
      &llama_adapter(),
      &qwen2_adapter(),
      &qwen3_adapter(),
      &mixtral_adapter(),
      &qwen3_moe_adapter(),
      &deepseek_v3_adapter(),
      &deepseek_v32_adapter(),
      &deepseek_v4_adapter(),
      &glm_moe_dsa_adapter(),
      &qwen3_next_adapter(),
      &qwen3_5_moe_adapter(),
      &llava_adapter(),
      &kimi_k25_adapter(),
      &mistral_adapter(),
  };
  return kAdapters;
}

std::string supported_list() {
  std::string s;
  for (const auto* a : table()) s += (s.empty() ? "" : ", ") + std::string(a->family());
  return s;
}

}  // namespace

std::vector<std::string> supported_families() {
  std::vector<std::string> out;
  for (const auto* a : table()) out.push_back(a->family());
  return out;
}

Result<const Adapter*> find_adapter_by_family(const std::string& family) {
  for (const auto* a : table())
    if (family == a->family()) return a;
  return Status::Unsupported("unknown architecture '" + family + "' (supported: " + supported_list() + ")");
}

Result<const Adapter*> find_adapter(const nlohmann::json& config) {
  if (!config.is_object())
    return Status::InvalidArgument(std::string("config.json: top level is ") + json_kind(config) + ", not an object");
  std::string model_type;
  if (auto it = config.find("model_type"); it != config.end() && !it->is_null()) {
    if (!it->is_string())
      return Status::InvalidArgument(std::string("config.json: key 'model_type' must be a string, got ") +
                                     json_kind(*it) + " (" + json_excerpt(*it) + ")");
    model_type = it->get<std::string>();
  }
  for (const auto* a : table())
    if (model_type == a->family()) return a;
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    arch = config["architectures"][0].get<std::string>();
  for (const auto* a : table())
    for (const auto& name : a->architectures())
      if (name == arch) return a;
  return Status::Unsupported("config.json: unknown architecture (model_type '" + model_type + "', architectures[0] '" +
                             arch + "'); supported model types: " + supported_list());
}

}  // namespace dayzero::model
