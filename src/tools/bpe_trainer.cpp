// Byte-level BPE trainer (see bpe_trainer.h). Deterministic by construction: words are kept in a
// sorted map and every tie is broken on token strings, so the same input gives the same file.
#include "tools/bpe_trainer.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dayzero::tools {
using namespace dayzero::tokenizer;  // the pre-tokenizer and byte-level alphabet it trains for

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

  // Pair counts are kept up to date incrementally: a merge only touches the words that hold
  // the merged pair. The best pair comes from a max-heap whose stale entries (a count that has
  // changed since the push) are skipped.
  auto key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::set<size_t>> pair_words;
  auto count_word = [&](size_t w, int sign) {
    const auto& [symbols, count] = words[w];
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      uint64_t k = key(symbols[i], symbols[i + 1]);
      pair_counts[k] += sign * count;
      if (sign > 0) pair_words[k].insert(w);
    }
  };
  for (size_t w = 0; w < words.size(); ++w) count_word(w, +1);

  struct Candidate {
    int64_t count;
    int32_t left, right;
  };
  // Orders the heap: higher count first, then the pair whose token strings sort first.
  auto worse = [&vocab](const Candidate& a, const Candidate& b) {
    if (a.count != b.count) return a.count < b.count;
    return std::tie(vocab[a.left], vocab[a.right]) > std::tie(vocab[b.left], vocab[b.right]);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
  for (const auto& [k, count] : pair_counts) {
    heap.push({count, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});
  }

  while (vocab.size() < target) {
    std::optional<Candidate> best;
    while (!heap.empty()) {
      Candidate top = heap.top();
      heap.pop();
      auto it = pair_counts.find(key(top.left, top.right));
      if (it != pair_counts.end() && it->second == top.count && top.count > 0) {
        best = top;
        break;
      }
    }
    if (!best) {
      return Status::InvalidArgument("tokenizer training: the text gives only " + std::to_string(vocab.size()) +
                                     " tokens, vocab_size " + std::to_string(vocab_size) + " needs more text");
    }
    const int32_t left = best->left, right = best->right;
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

    const std::set<size_t> touched = pair_words[key(left, right)];
    std::set<uint64_t> changed;
    for (size_t w : touched) {
      auto& symbols = words[w].first;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) changed.insert(key(symbols[i], symbols[i + 1]));
      count_word(w, -1);
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
      count_word(w, +1);
      for (size_t i = 0; i + 1 < symbols.size(); ++i) changed.insert(key(symbols[i], symbols[i + 1]));
    }
    for (uint64_t k : changed) {
      int64_t count = pair_counts[k];
      if (count > 0) heap.push({count, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});
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

}  // namespace dayzero::tools
