// The BPE model of tokenizer.json ("model" with type "BPE"): vocabulary, ranked merges and the
// merge loop that turns one pre-tokenized word into ids. Handles byte_fallback (<0xXX> tokens),
// unk_token with fuse_unk, ignore_merges, continuing_subword_prefix and end_of_word_suffix.
// Not handled: dropout (a training-time option; a non-zero dropout fails the load).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

// Hash for unordered maps keyed by std::string that are probed with std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Builds the model from the "model" object of tokenizer.json (its options) and its vocabulary
  // and merges, already parsed (see tokenizer_json.h). Errors: Corrupt when a merge names a
  // token missing from the vocabulary (as `tokenizers` refuses such a file) or an id is out of
  // range, Unsupported for a non-zero dropout.
  static Result<std::unique_ptr<BpeModel>> create(const nlohmann::json& model,
                                                  std::vector<std::pair<std::string, int64_t>> vocab,
                                                  const std::vector<std::pair<std::string, std::string>>& merges);

  // Appends the ids of one pre-tokenized word. Thread-safe (the word cache is locked).
  void tokenize(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when no vocabulary entry has this id.
  const std::string* id_to_token(int32_t id) const;
  // Number of vocabulary entries (what `tokenizers` calls the model's vocab size).
  size_t size() const { return vocab_.size(); }
  // One past the largest vocabulary id.
  int32_t id_limit() const { return static_cast<int32_t>(vocab_r_.size()); }

 private:
  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<int32_t>* out) const;
  Status add_merge(std::string_view a, std::string_view b, int32_t rank);

  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenMap vocab_;
  std::vector<const std::string*> vocab_r_;  // id -> entry of vocab_, nullptr for gaps
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xXX>" per byte, -1 when absent (byte_fallback only)

  // Words seen before: merging is the costly step and prompts repeat words.
  static constexpr size_t kCacheCapacity = 65536;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace dayzero::tokenizer
