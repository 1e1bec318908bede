// Reading JSON from a model folder, which is untrusted input: a bounded read of a regular file
// (never a FIFO or device, which would block), a parse with a nesting-depth limit (a deep value
// would overflow the stack when later copied or printed) and optional refusal of duplicate
// keys, and a short excerpt of a value for messages. Not a schema checker: callers check types.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace dayzero {

// Deepest nesting of objects and arrays accepted; real configs, tokenizers and headers stay
// under 10.
inline constexpr int kMaxJsonDepth = 64;
// Largest JSON file read from a model folder (tokenizer.json of a 200k vocabulary is ~20 MiB).
inline constexpr uint64_t kMaxJsonFileBytes = 512ull << 20;

struct JsonParseOptions {
  int max_depth = kMaxJsonDepth;
  bool reject_duplicate_keys = false;  // a key given twice in one object is an error
};

// Parses text; source_name (a path) starts every message. Corrupt for malformed text, nesting
// deeper than max_depth, or a duplicate key (naming it). Never throws.
Result<nlohmann::json> parse_json_limited(std::string_view text, const std::string& source_name,
                                          const JsonParseOptions& options = {});

// Reads the whole of path, refusing (before any read, and without blocking) what is not a
// regular file once symlinks are followed. NotFound when absent; InvalidArgument when not a
// regular file or larger than max_bytes; IoError for read failures. Messages name the path.
Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes);

// read_regular_file(path, kMaxJsonFileBytes) then parse_json_limited(text, path, options).
Result<nlohmann::json> read_json_file(const std::string& path, const JsonParseOptions& options = {});

// A one-line description of j for messages, about max_chars long: scalars as written (strings
// quoted and cut), a short list of scalars as written ("[64,32]"), other containers as their
// kind and size ("an array of 3", "an object of 2"). Never recursive.
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 40);

// "a string", "an integer", "an object", ...: the JSON kind of j, for type errors.
const char* json_kind(const nlohmann::json& j);

}  // namespace dayzero
