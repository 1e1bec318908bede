// Tokenizer: a Hugging Face tokenizer.json BPE tokenizer (byte-level as in Qwen2/3, Llama 3 and
// DeepSeek V3; SentencePiece-style with byte fallback as in Llama 2, Mistral v0.1, llava-1.5),
// giving the same ids as the Python `tokenizers` library for one sequence; or a tiktoken.model
// BPE as Kimi-K2 ships it, giving the ids of Python `tiktoken` with Kimi's pattern.
// Not supported: WordPiece, WordLevel and Unigram models, pairs of sequences, offsets,
// truncation and padding; chat templates live elsewhere.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dayzero::tokenizer {

class Tokenizer {
 public:
  // Reads <model_dir>/tokenizer.json, or where there is none <model_dir>/tiktoken.model, and,
  // when present, tokenizer_config.json and generation_config.json. Errors: NotFound naming
  // the folder and both files when neither exists, IoError for an unreadable file, plus those
  // of from_json / from_tiktoken, each prefixed with the folder.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_dir);

  // Builds a tokenizer from file contents; empty config texts mean "no such file".
  // tokenizer_config.json contributes what `transformers` (5.x) takes from it:
  //  - special tokens it names (bos/eos/unk/pad/... and additional_special_tokens) and its
  //    added_tokens_decoder entries join the added tokens when tokenizer.json lacks them;
  //  - bos_token gives bos_id(); eos_token gives eos_ids() unless generation_config.json has
  //    eos_token_id (an int or a list).
  //  add_bos_token / add_eos_token are NOT applied: transformers drops them whenever a
  //  tokenizer.json exists and uses its post_processor as is (PreTrainedTokenizerBase.
  //  _from_pretrained), for LlamaTokenizer and TokenizersBackend alike.
  // Errors: Corrupt for malformed JSON or inconsistent contents (a merge naming a token that is
  // not in the vocabulary), Unsupported naming a model/normalizer/pre_tokenizer/decoder/
  // post_processor type this tokenizer does not implement.
  static Result<std::unique_ptr<Tokenizer>> from_json(const std::string& tokenizer_json_text,
                                                      const std::string& tokenizer_config_json_text = "",
                                                      const std::string& generation_config_json_text = "");

  // Builds a tiktoken tokenizer laid out as Kimi-K2's (tokenization_kimi.py) from file
  // contents; empty config texts mean "no such file":
  //  - tiktoken.model: "<base64 token bytes> <rank>" per line, rank = id, ranks 0 .. n-1;
  //  - special tokens: tokenizer_config.json's added_tokens_decoder entries (ids n and up),
  //    and "<|reserved_token_{id}|>" for the unnamed ids of [n, n + 256); encode matches them
  //    anywhere in the text, as tiktoken's encode(text, allowed_special="all") does;
  //  - bos_token / eos_token name bos_id() / eos_ids() ("[BOS]" / "[EOS]" when absent, Kimi's
  //    defaults); generation_config.json's eos_token_id takes precedence for eos_ids().
  //  The pre-tokenizer is Kimi's pat_str (kKimiPattern in tiktoken.h). encode adds no special
  //  tokens (add_special_tokens has no effect: Kimi's encode adds none); token strings are the
  //  token bytes in GPT-2's byte-level alphabet, as Kimi's get_vocab names them.
  // Errors: Corrupt naming tiktoken.model and the line of a malformed entry, or naming the
  // inconsistent special token; Corrupt for malformed JSON.
  static Result<std::unique_ptr<Tokenizer>> from_tiktoken(const std::string& tiktoken_model_text,
                                                          const std::string& tokenizer_config_json_text = "",
                                                          const std::string& generation_config_json_text = "");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Ids of `text`; add_special_tokens applies tokenizer.json's post_processor (e.g. BOS).
  // Invalid UTF-8 in text is first replaced by U+FFFD. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Text of `ids` through tokenizer.json's decoder; ids unknown to the tokenizer are skipped,
  // special tokens too when skip_special_tokens. Thread-safe.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // One past the largest id of the vocabulary and the added tokens (the embedding rows the
  // tokenizer can address; config.json's vocab_size may be larger).
  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  const std::vector<int32_t>& eos_ids() const;
  // True for added tokens marked special (skipped by decode with skip_special_tokens).
  bool is_special(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored in tokenizer.json (byte-level form for byte-level BPE; for
  // tiktoken the byte-level form of its bytes); empty for an unknown id.
  std::string id_to_token(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dayzero::tokenizer
