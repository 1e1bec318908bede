// A tiny deterministic byte-level BPE trainer that writes a complete tokenizer.json, so that
// generated test models carry a self-contained tokenizer. Tooling (dz_tools), not part of the
// tokenizer library a run loads; not a replacement for the `tokenizers` trainers: no frequency
// threshold, no parallelism, meant for small corpora.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dayzero::tools {

// Trains byte-level BPE on `training_text` (GPT-2 pre-tokenizer regex, 256-byte alphabet with
// ids 0..255 in byte order, then greedy merges of the most frequent adjacent pair; ties go to
// the pair whose (left, right) token strings sort first) until the vocabulary plus
// `special_tokens` holds exactly `vocab_size` entries. Special tokens become added tokens
// (special, not normalized) with the last ids, in the given order.
// Returns the tokenizer.json text, loadable by tokenizer::Tokenizer::from_json and by Python `tokenizers`.
// Errors: InvalidArgument when vocab_size < 256 + special_tokens.size(), when a special token is
// empty or repeated, or when the text runs out of pairs to merge before reaching vocab_size.
Result<std::string> train_byte_level_tokenizer_json(std::string_view training_text, int vocab_size,
                                                    const std::vector<std::string>& special_tokens);

}  // namespace dayzero::tools
