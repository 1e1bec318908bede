// Pre-tokenizers of tokenizer.json ("pre_tokenizer" key): Split (String/Regex pattern, the five
// split behaviours, invert), ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
// Punctuation and Sequence. Each cuts a piece of normalized text into smaller pieces that
// the model encodes independently. Not supported: BertPreTokenizer, CharDelimiterSplit,
// UnicodeScripts (load fails with Unsupported).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

// A piece of normalized text. `at_origin` is true when the piece starts at offset 0 of the
// original input; Metaspace's prepend_scheme "first" depends on it.
struct Piece {
  std::string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, dropping empty ones, in order.
  virtual void pre_tokenize(std::vector<Piece>* pieces) const = 0;
};

// How a Split keeps the pattern matches (SplitDelimiterBehavior in `tokenizers`).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Builds the pre-tokenizer described by `spec`; JSON null yields nullptr.
// Errors: Unsupported naming an unknown "type" or behaviour, InvalidArgument for a bad regex.
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& spec);

// The regex GPT-2 used and the ByteLevel pre-tokenizer applies when use_regex is true.
extern const char kGpt2SplitPattern[];

}  // namespace dayzero::tokenizer
