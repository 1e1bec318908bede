// A tiktoken BPE (the `tiktoken.model` of Kimi-K2 and Moonlight): ranked byte strings, the
// pre-tokenizer regex of Kimi's tokenization_kimi.py, and special tokens matched in the text
// before anything else, giving the ids of Python `tiktoken`'s encode(text, allowed_special="all").
// Not a tokenizer.json pipeline: no normalizer, no byte-level character mapping, no
// post-processor; Tokenizer (tokenizer.h) reads the files and chooses between the two.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace dayzero::tokenizer {

// The pre-tokenizer pattern of moonshotai/Kimi-K2-Instruct tokenization_kimi.py
// (TikTokenTokenizer.pat_str), verbatim: Rust-regex syntax, with class intersections (&&).
extern const char kKimiPattern[];
// Kimi's TikTokenTokenizer.num_reserved_special_tokens: ids [n_ranks, n_ranks + 256) are
// special tokens, named by tokenizer_config.json or "<|reserved_token_{id}|>".
inline constexpr int32_t kKimiReservedSpecialTokens = 256;

// kKimiPattern spelled for PCRE2 (Regex): each [X&&[^\p{Han}]] becomes a lookahead
// (?:(?!HAN)[X]) and \p{Han} the explicit ranges of Script=Han that tiktoken's Rust regex
// uses (Unicode 16; PCRE2 10.40+ reads \p{Han} as Script_Extensions and knows an older Unicode).
std::string kimi_pattern_for_pcre2();

struct TiktokenSpecial {
  int32_t id = -1;
  std::string content;
  bool special = true;  // false only where tokenizer_config.json says "special": false
};

class TiktokenModel {
 public:
  // Parses tiktoken.model text (one "<base64 of the token bytes> <rank>" per line, blank lines
  // skipped) and adds `specials`, filling the unnamed ids of [n_ranks, n_ranks + n_reserved)
  // with "<|reserved_token_{id}|>" as Kimi does. `file_name` names the file in errors.
  // Ranks must be exactly 0 .. n_ranks-1 (Kimi gives the next ids to special tokens).
  // Errors: Corrupt naming the file and line for a malformed line (field count, base64, rank),
  // a repeated token or rank, or a rank out of that range; Corrupt naming the file for a byte
  // without a rank (tiktoken could not encode it); Corrupt for a special token whose id is a
  // rank or taken by another, or whose content repeats; InvalidArgument when `pattern` does
  // not compile.
  static Result<std::unique_ptr<TiktokenModel>> create(std::string_view model_text, const std::string& file_name,
                                                       std::vector<TiktokenSpecial> specials, int32_t n_reserved,
                                                       std::string_view pattern);

  // Appends the ids of `text`: special tokens first (leftmost, then longest), then on the text
  // between them: regex pieces, each looked up whole, else merged pairwise by lowest rank as
  // tiktoken's byte_pair_merge does. REQUIRES: text is valid UTF-8. Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>* out) const;
  // The bytes of `ids` (special tokens as their content), made valid UTF-8 as Python's
  // bytes.decode("utf-8", "replace") does; unknown ids are skipped, special ones too when
  // skip_special. Thread-safe.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // Number of ranked tokens (tiktoken's len(mergeable_ranks); the first special id for Kimi).
  int32_t n_ranks() const { return static_cast<int32_t>(bytes_by_rank_.size()); }
  // One past the largest rank or special id.
  int32_t id_limit() const { return id_limit_; }
  std::optional<int32_t> special_id(std::string_view content) const;
  const TiktokenSpecial* find_special(int32_t id) const;
  // Ranked tokens are named by their bytes in GPT-2's byte-level alphabet, as Kimi's
  // get_vocab / convert_ids_to_tokens name them; specials by their content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;

 private:
  TiktokenModel() = default;
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
  std::optional<int32_t> rank_of(std::string_view bytes) const;

  std::vector<std::string> bytes_by_rank_;  // rank -> token bytes
  TokenMap ranks_;                          // token bytes -> rank
  std::vector<TiktokenSpecial> specials_;   // sorted by id
  TokenMap special_ids_;                    // content -> id
  std::unique_ptr<Regex> special_regex_;    // alternation of the contents, longest first
  std::unique_ptr<Regex> pattern_;
  int32_t id_limit_ = 0;
};

}  // namespace dayzero::tokenizer
