// What a config.json leaves out, and where every value the analysis uses came from. A published
// config omits the keys equal to its config class's defaults (save_pretrained writes the
// difference), so a key that is absent means "the class default", not "zero" and not "llama's".
// The defaults come, in this order, from the model folder's own configuration_*.py (remote
// code, python_source.h), then from a table of every transformers config class
// (data/config_defaults.json, made by tools/make_config_defaults.py from transformers' source
// and compiled in), then from the class's derived rules (head_dim = hidden_size //
// num_attention_heads, num_key_value_heads = num_attention_heads); what none of them gives is
// the analysis's own fallback, marked guessed.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "analysis/python_source.h"

namespace dayzero::analysis {

enum class KeyFrom { kConfig, kFolderCode, kTable, kDerived, kGuessed };
// "config keys", "folder defaults", "transformers defaults", "derived", "guessed"
const char* key_from_name(KeyFrom f);

struct KeyOrigin {
  KeyFrom from = KeyFrom::kConfig;
  std::string detail;  // "config.json text_config", "configuration_x.py XConfig", "transformers 5.24.0 Gemma2Config"
  nlohmann::json value;
};
using KeyOrigins = std::map<std::string, KeyOrigin>;  // key ("vision_config.hidden_size" for the tower)

// The table: transformers' version it was made from, and one model_type's entry (nullptr when
// transformers has no such model_type): {"class", "file", "defaults", "derived", "attribute_map",
// "sub_configs", "sub_config_defaults", "unreadable"}.
const std::string& defaults_table_version();
const nlohmann::json* table_entry(const std::string& model_type);

// One section of config.json (the top level, text_config or vision_config) completed with the
// defaults above. where: "config.json" or "config.json text_config"; prefix: prepended to the
// keys in origins ("" or "vision_config."); model_type: the section's (or the one its parent's
// sub_configs name); spec_defaults: the parent's SubConfigSpec init_kwargs for this section, or
// nullptr. A folder class is the one whose model_type matches. Risks: the folder's defaults that
// could not be read.
nlohmann::json fill_defaults(const nlohmann::json& section, const std::string& where, const std::string& prefix,
                             const std::string& model_type, const std::vector<PyConfigFile>& code,
                             const nlohmann::json* spec_defaults, KeyOrigins& origins, std::vector<std::string>& risks);

// Evaluates a derived rule ("a", "a // b", "a * 4", "4 * a") over the integer keys of j.
std::optional<int64_t> eval_derived(const std::string& expr, const nlohmann::json& j);

}  // namespace dayzero::analysis
