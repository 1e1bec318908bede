// Typed reads of tokenizer.json fields and pattern objects (see json_util.h).
// nlohmann exceptions never leave this file: every access is checked first.
#include "tokenizer/json_util.h"

namespace dayzero::tokenizer {

using nlohmann::json;

Result<std::string> json_string(const json& spec, const char* key, const std::string& context) {
  if (!spec.is_object()) return Status::Corrupt(context + ": expected an object");
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_string()) {
    return Status::Corrupt(context + ": missing string '" + key + "'");
  }
  return it->get<std::string>();
}

Result<bool> json_bool(const json& spec, const char* key, bool fallback, const std::string& context) {
  if (!spec.is_object()) return Status::Corrupt(context + ": expected an object");
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Status::Corrupt(context + ": '" + key + "' is not a boolean");
  return it->get<bool>();
}

Result<std::unique_ptr<Regex>> make_pattern(const json& spec, const std::string& context) {
  if (!spec.is_object() || !spec.contains("pattern") || !spec["pattern"].is_object()) {
    return Status::Corrupt(context + ": missing object 'pattern'");
  }
  const json& pattern = spec["pattern"];
  if (pattern.contains("String") && pattern["String"].is_string()) {
    auto regex = Regex::literal(pattern["String"].get<std::string>());
    if (!regex.ok()) return regex.status().with_context(context);
    return regex;
  }
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    auto regex = Regex::compile(pattern["Regex"].get<std::string>());
    if (!regex.ok()) return regex.status().with_context(context);
    return regex;
  }
  return Status::Corrupt(context + ": 'pattern' holds neither 'String' nor 'Regex'");
}

std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (auto [start, end] : pattern.find_all(text)) {
    out.append(text.substr(prev, start - prev));
    out.append(content);
    prev = end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace dayzero::tokenizer
