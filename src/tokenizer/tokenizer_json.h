// Parsing of tokenizer.json that streams the two big lists, model.vocab and model.merges, into
// plain vectors instead of a JSON tree (most of a 150k-token file), and keeps the rest as JSON.
// Not a validator: it only checks the shapes of those two lists; the builders check the rest.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

struct TokenizerJson {
  // The document, without model.vocab when it is an object and model.merges when it is an array.
  nlohmann::json document;
  bool has_vocab = false;                                    // model.vocab was streamed
  std::vector<std::pair<std::string, int64_t>> vocab;        // (token, id) in file order
  bool has_merges = false;                                   // model.merges was streamed
  std::vector<std::pair<std::string, std::string>> merges;   // (left, right) in rank order
};

// Errors: Corrupt with the parser's message and byte offset, or naming the malformed vocab
// entry or merge.
Result<TokenizerJson> parse_tokenizer_json(const std::string& text);

}  // namespace dayzero::tokenizer
