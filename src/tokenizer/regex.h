// A compiled PCRE2 pattern (UTF + UCP, JIT when available) standing in for the Oniguruma
// regexes that Hugging Face `tokenizers` uses in Split, Replace and ByteLevel; \s, \w, \d and
// \p{..} are rewritten so that PCRE2 classifies characters as that Oniguruma does.
// Not a general regex API: it only finds successive non-overlapping matches.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace dayzero::tokenizer {

class Regex {
 public:
  // Compiles `pattern` (PCRE2 syntax, which covers what tokenizer.json files use:
  // \p{L}, (?i:...), (?!\S), ...). Returns InvalidArgument naming the pattern and offset.
  static Result<std::unique_ptr<Regex>> compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static Result<std::unique_ptr<Regex>> literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [start, end) of successive matches, as Rust's find_iter yields them: after an
  // empty match the search moves on one character, and an empty match right at the end of the
  // previous match is skipped. REQUIRES: text is valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  struct Code;
  std::string pattern_;
  Code* code_ = nullptr;
};

}  // namespace dayzero::tokenizer
