// Every key of config.json accounted for: each key of the top level, text_config and
// vision_config (and of rope_scaling / rope_parameters) is understood (the analysis reads it and
// says what it changed), irrelevant to inference (a list, each with its reason) or unrecognised
// (a risk, with its value). An enum value the analysis does not know (scoring_func
// "sqrtsoftplus", a layer_types kind) is unrecognised too, never read as the nearest known one.
// Not a validator: a key's type is checked where it is read (dims.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dayzero::analysis {

enum class KeyClass { kUnderstood, kIrrelevant, kUnrecognised };
const char* key_class_name(KeyClass c);  // "understood", "irrelevant", "unrecognised"

struct KeyAccount {
  std::string key;    // "hidden_size", "text_config.layer_types", "rope_parameters.factor"
  KeyClass cls = KeyClass::kUnrecognised;
  std::string what;   // understood: what it changed; irrelevant: why; unrecognised: why it is a risk
  std::string value;  // the value as written (shortened)
};

// One entry per key of config.json's sections, in file order within a section.
std::vector<KeyAccount> account_keys(const nlohmann::json& config);

// A feature a key names that nothing in the estimate models (hyper-connections, grouped output
// projection, soft-capping, ...): the register says "needs review" unless a proof says otherwise.
struct KeyFeature {
  std::string feature;  // the feature key
  std::string key;      // the config key that names it ("text_config.hc_mult")
  std::string detail;   // what it does, with the value
  bool params = false;  // it has parameters the estimate does not count
};
std::vector<KeyFeature> key_features(const nlohmann::json& config);

// Values of an enum key (or of a list of enums: layer_types) that the analysis does not know,
// with how many times each occurs, in order of first occurrence: {"sqrtsoftplus", 1}.
std::vector<std::pair<std::string, int>> unknown_enum_values(const nlohmann::json& section, const std::string& key);

}  // namespace dayzero::analysis
