// Per-layer config lists and GLM-5's indexer types (dsa_config.h).
#include "model/dsa_config.h"

#include <algorithm>

#include "core/json.h"
#include "model/hparams.h"

namespace dayzero::model {

Result<std::vector<std::string>> config_layer_list(const nlohmann::json& c, const char* key, int64_t n_layer,
                                            std::initializer_list<const char*> allowed) {
  std::vector<std::string> out;
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return out;
  if (!it->is_array())
    return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be a list, got " +
                                   json_kind(*it));
  for (const auto& e : *it) {
    const bool ok = e.is_string() && std::any_of(allowed.begin(), allowed.end(),
                                                 [&](const char* a) { return e.get<std::string>() == a; });
    if (!ok) {
      std::string names;
      for (const char* a : allowed) names += std::string(names.empty() ? "" : ", ") + "'" + a + "'";
      return Status::InvalidArgument(std::string("config.json: key '") + key + "' holds " + e.dump() +
                                     " (each entry must be one of " + names + ")");
    }
    out.push_back(e.get<std::string>());
  }
  if (static_cast<int64_t>(out.size()) != n_layer)
    return Status::InvalidArgument(std::string("config.json: key '") + key + "' has " + std::to_string(out.size()) +
                                   " entries for num_hidden_layers " + std::to_string(n_layer));
  return out;
}

Result<std::vector<bool>> dsa_shared_layers(const nlohmann::json& c, int64_t n_layer) {
  DZ_ASSIGN_OR_RETURN(std::vector<std::string> types, config_layer_list(c, "indexer_types", n_layer, {"full", "shared"}));
  auto pattern = c.find("index_topk_pattern");
  if (types.empty() && pattern != c.end() && pattern->is_string()) {
    for (char ch : pattern->get<std::string>()) {
      if (ch != 'F' && ch != 'S')
        return Status::InvalidArgument(std::string("config.json: key 'index_topk_pattern' holds '") + ch +
                                       "' (each letter must be F or S)");
      types.push_back(ch == 'F' ? "full" : "shared");
    }
    if (static_cast<int64_t>(types.size()) != n_layer)
      return Status::InvalidArgument("config.json: key 'index_topk_pattern' has " + std::to_string(types.size()) +
                                     " letters for num_hidden_layers " + std::to_string(n_layer));
  } else if (types.empty() && pattern != c.end() && !pattern->is_null()) {
    DZ_ASSIGN_OR_RETURN(types, config_layer_list(c, "index_topk_pattern", n_layer, {"full", "shared"}));
  }
  if (types.empty()) {
    DZ_ASSIGN_OR_RETURN(const int64_t freq_raw, json_int_or(c, "index_topk_freq", 1));
    DZ_ASSIGN_OR_RETURN(const int64_t offset, json_int_or(c, "index_skip_topk_offset", 2));
    const int64_t freq = std::max<int64_t>(freq_raw, 1);
    for (int64_t i = 0; i < n_layer; ++i)
      types.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
  }
  if (!types.empty() && types[0] == "shared")
    return Status::InvalidArgument("config.json: indexer type of layer 0 is 'shared', but there is no earlier layer "
                                   "whose top-k it could reuse");
  std::vector<bool> shared;
  for (const auto& t : types) shared.push_back(t == "shared");
  return shared;
}

Status read_dsa_indexer_sizes(const nlohmann::json& c, const std::string& family, HParams& hp) {
  if (hp.deepseek().mla.q_lora_rank <= 0)
    return Status::InvalidArgument("config.json: " + family + " needs a positive 'q_lora_rank' (the indexer's query "
                                   "comes from the q LoRA residual)");
  DsaParams& d = hp.deepseek().dsa;
  DZ_ASSIGN_OR_RETURN(d.index_topk, json_int(c, "index_topk"));
  DZ_ASSIGN_OR_RETURN(d.index_n_heads, json_int(c, "index_n_heads"));
  DZ_ASSIGN_OR_RETURN(d.index_head_dim, json_int(c, "index_head_dim"));
  if (d.index_head_dim < hp.deepseek().mla.qk_rope_head_dim)
    return Status::InvalidArgument("config.json: index_head_dim " + std::to_string(d.index_head_dim) +
                                   " is smaller than qk_rope_head_dim " + std::to_string(hp.deepseek().mla.qk_rope_head_dim));
  return Status::Ok();
}

}  // namespace dayzero::model
