// Byte-level BPE trainer (see trainer.h). Deterministic by construction: words are kept in a
// sorted map and every tie is broken on token strings, so the same input gives the same file.
#include "tokenizer/trainer.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <utility>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

Result<std::string> train_byte_level_tokenizer_json(std::string_view training_text, int vocab_size,
                                                    const std::vector<std::string>& special_tokens) {
  const int n_special = static_cast<int>(special_tokens.size());
  if (vocab_size < 256 + n_special) {
    return Status::InvalidArgument("tokenizer training: vocab_size " + std::to_string(vocab_size) +
                                   " is below 256 bytes + " + std::to_string(n_special) + " special tokens");
  }
  std::set<std::string> seen;
  for (const auto& token : special_tokens) {
    if (token.empty()) return Status::InvalidArgument("tokenizer training: empty special token");
    if (!seen.insert(token).second) {
      return Status::InvalidArgument("tokenizer training: special token '" + token + "' is repeated");
    }
  }

  // Words of the GPT-2 pre-tokenizer with their counts, as byte-id sequences.
  DZ_ASSIGN_OR_RETURN(auto split, Regex::compile(kGpt2SplitPattern));
  const std::string text = make_valid_utf8(training_text);
  std::map<std::string, int64_t> word_counts;
  for (auto [start, end] : split->find_all(text)) ++word_counts[text.substr(start, end - start)];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  words.reserve(word_counts.size());
  for (const auto& [word, count] : word_counts) {
    std::vector<int32_t> symbols;
    for (unsigned char c : word) symbols.push_back(c);
    words.emplace_back(std::move(symbols), count);
  }

  std::vector<std::string> vocab;
  std::map<std::string, int32_t> vocab_index;
  for (int b = 0; b < 256; ++b) {
    vocab.push_back(byte_level_char(static_cast<unsigned char>(b)));
    vocab_index.emplace(vocab.back(), b);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const size_t target = static_cast<size_t>(vocab_size - n_special);

  while (vocab.size() < target) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pair_counts;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pair_counts[{symbols[i], symbols[i + 1]}] += count;
    }
    if (pair_counts.empty()) {
      return Status::InvalidArgument("tokenizer training: the text gives only " + std::to_string(vocab.size()) +
                                     " tokens, vocab_size " + std::to_string(vocab_size) + " needs more text");
    }
    const std::pair<int32_t, int32_t>* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [pair, count] : pair_counts) {
      bool better = count > best_count;
      if (!better && count == best_count && best != nullptr) {
        better = std::tie(vocab[pair.first], vocab[pair.second]) <
                 std::tie(vocab[best->first], vocab[best->second]);
      }
      if (better) {
        best = &pair;
        best_count = count;
      }
    }
    const auto [left, right] = *best;
    std::string merged = vocab[left] + vocab[right];
    int32_t merged_id;
    auto existing = vocab_index.find(merged);
    if (existing != vocab_index.end()) {
      merged_id = existing->second;  // another split of the same string is already a token
    } else {
      merged_id = static_cast<int32_t>(vocab.size());
      vocab.push_back(merged);
      vocab_index.emplace(merged, merged_id);
    }
    merges.emplace_back(vocab[left], vocab[right]);
    for (auto& [symbols, count] : words) {
      std::vector<int32_t> next;
      next.reserve(symbols.size());
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          next.push_back(merged_id);
          ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols = std::move(next);
    }
  }

  using ordered_json = nlohmann::ordered_json;
  ordered_json model_vocab = ordered_json::object();
  for (size_t id = 0; id < vocab.size(); ++id) model_vocab[vocab[id]] = id;
  ordered_json model_merges = ordered_json::array();
  for (const auto& [a, b] : merges) model_merges.push_back({a, b});
  ordered_json added = ordered_json::array();
  for (int i = 0; i < n_special; ++i) {
    added.push_back({{"id", static_cast<int>(vocab.size()) + i},
                     {"content", special_tokens[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  auto byte_level = [](bool add_prefix_space, bool trim_offsets) {
    return ordered_json{{"type", "ByteLevel"},
                        {"add_prefix_space", add_prefix_space},
                        {"trim_offsets", trim_offsets},
                        {"use_regex", true}};
  };
  ordered_json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level(false, true)},
      {"post_processor", byte_level(false, true)},
      {"decoder", byte_level(false, true)},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", model_vocab},
        {"merges", model_merges}}},
  };
  return root.dump(1);
}

}  // namespace dayzero::tokenizer
