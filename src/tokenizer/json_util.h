// Small helpers shared by the tokenizer.json component builders: typed field reads that
// return Status instead of throwing, the {"String"|"Regex"} pattern object, and replace-all.
// Not a JSON layer: callers still hold nlohmann::json values.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace dayzero::tokenizer {

// spec[key] as a string; Corrupt("<context>: missing string '<key>'") otherwise.
Result<std::string> json_string(const nlohmann::json& spec, const char* key, const std::string& context);

// spec[key] as a bool, `fallback` when absent or null; Corrupt when of another type.
Result<bool> json_bool(const nlohmann::json& spec, const char* key, bool fallback, const std::string& context);

// spec["pattern"] = {"String": literal} or {"Regex": pattern}, compiled.
Result<std::unique_ptr<Regex>> make_pattern(const nlohmann::json& spec, const std::string& context);

// text with every match of `pattern` replaced by `content`.
std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content);

}  // namespace dayzero::tokenizer
