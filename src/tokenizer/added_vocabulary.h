// Added tokens ("added_tokens" of tokenizer.json, plus those transformers adds from
// tokenizer_config.json): id assignment and the splitting of input text on them, with the
// longest-leftmost match and the lstrip / rstrip / single_word / normalized options of
// Hugging Face `tokenizers`. Not a vocabulary of its own: ids come from the model when shared.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace dayzero::tokenizer {

struct AddedToken {
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// One piece of input after splitting on added tokens: either an added token (id >= 0) or
// normalized text still to pre-tokenize (id == -1).
struct Segment {
  int32_t id = -1;
  Piece piece;
};

class AddedVocabulary {
 public:
  // Adds a token as `tokenizers` does: an existing added token or model entry keeps its id,
  // a new one gets the next id after the model vocabulary and the added tokens so far.
  // Returns the token's id. Call build() once all tokens are in.
  int32_t add(const AddedToken& token, const BpeModel& model);
  // Builds the matchers; normalized tokens are matched in their normalized form.
  void build(const Normalizer* normalizer);

  // Splits `text` (valid UTF-8) on added tokens, normalizing the text between them, and
  // drops empty pieces, in the order of `tokenizers`' extract_and_normalize.
  std::vector<Segment> split(std::string_view text, const Normalizer* normalizer) const;

  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* find(int32_t id) const;
  bool contains(std::string_view content) const { return token_to_id(content).has_value(); }
  bool is_special_content(std::string_view content) const;
  int32_t max_id() const { return max_id_; }

 private:
  // Byte trie of token contents, matched leftmost-longest like aho-corasick's LeftmostLongest.
  class Matcher {
   public:
    void insert(std::string_view key, int32_t id);
    // Finds the leftmost, then longest, key in text[from..]: returns (start, end, id).
    bool find(std::string_view text, size_t from, size_t* start, size_t* end, int32_t* id) const;

   private:
    struct Node {
      std::map<unsigned char, int32_t> children;
      int32_t id = -1;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
  };

  void split_with(const Matcher& matcher, const Piece& piece, std::vector<Segment>* out) const;

  std::map<std::string, int32_t, std::less<>> by_content_;
  std::map<int32_t, AddedToken> by_id_;
  std::vector<int32_t> order_;  // ids in insertion order, specials first as the reference does
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents_;
  int32_t max_id_ = -1;
  Matcher raw_matcher_;
  Matcher normalized_matcher_;
  bool has_raw_ = false;
  bool has_normalized_ = false;
};

}  // namespace dayzero::tokenizer
