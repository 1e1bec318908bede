// BPE model (see bpe.h). The merge loop is the one of `tokenizers` (word.rs merge_all): a
// min-heap of candidate pairs ordered by (merge rank, position), with stale entries skipped,
// so ids match the reference exactly, including its tie-breaking.
#include "tokenizer/bpe.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <queue>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

using nlohmann::json;

namespace {

Result<std::optional<std::string>> optional_string(const json& model, const char* key) {
  auto it = model.find(key);
  if (it == model.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return Status::Corrupt(std::string("BPE model: '") + key + "' is not a string");
  return std::optional<std::string>(it->get<std::string>());
}

}  // namespace

Status BpeModel::add_merge(std::string_view a, std::string_view b, int32_t rank) {
  auto ia = vocab_.find(a);
  if (ia == vocab_.end()) return Status::Corrupt("BPE merge " + std::to_string(rank) + ": token '" + std::string(a) + "' is not in the vocabulary");
  auto ib = vocab_.find(b);
  if (ib == vocab_.end()) return Status::Corrupt("BPE merge " + std::to_string(rank) + ": token '" + std::string(b) + "' is not in the vocabulary");
  std::string merged(a);
  std::string_view tail = b;
  if (!continuing_subword_prefix_.empty() && tail.substr(0, continuing_subword_prefix_.size()) == continuing_subword_prefix_) {
    tail.remove_prefix(continuing_subword_prefix_.size());
  }
  merged += tail;
  auto im = vocab_.find(merged);
  if (im == vocab_.end()) return Status::Corrupt("BPE merge " + std::to_string(rank) + ": merged token '" + merged + "' is not in the vocabulary");
  // A repeated pair keeps its last rank, as the reference's map insertion does.
  merges_[pair_key(ia->second, ib->second)] = MergeTarget{rank, im->second};
  return Status::Ok();
}

Result<std::unique_ptr<BpeModel>> BpeModel::create(const json& model,
                                                   std::vector<std::pair<std::string, int64_t>> vocab,
                                                   const std::vector<std::pair<std::string, std::string>>& merges) {
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null()) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return Status::Unsupported("BPE model: dropout " + dropout->dump() + " (random merges) is not supported");
    }
  }
  DZ_ASSIGN_OR_RETURN(bpe->unk_token_, optional_string(model, "unk_token"));
  DZ_ASSIGN_OR_RETURN(auto prefix, optional_string(model, "continuing_subword_prefix"));
  DZ_ASSIGN_OR_RETURN(auto suffix, optional_string(model, "end_of_word_suffix"));
  bpe->continuing_subword_prefix_ = prefix.value_or("");
  bpe->end_of_word_suffix_ = suffix.value_or("");
  DZ_ASSIGN_OR_RETURN(bpe->fuse_unk_, json_bool(model, "fuse_unk", false, "BPE model"));
  DZ_ASSIGN_OR_RETURN(bpe->byte_fallback_, json_bool(model, "byte_fallback", false, "BPE model"));
  DZ_ASSIGN_OR_RETURN(bpe->ignore_merges_, json_bool(model, "ignore_merges", false, "BPE model"));

  bpe->vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id] : vocab) {
    if (id < 0 || id > INT32_MAX - 1) return Status::Corrupt("BPE model: vocab entry '" + token + "' has id " + std::to_string(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
    bpe->vocab_.insert_or_assign(std::move(token), static_cast<int32_t>(id));  // a repeated key keeps its last id
  }
  bpe->vocab_r_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : bpe->vocab_) bpe->vocab_r_[static_cast<size_t>(id)] = &token;

  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    DZ_RETURN_IF_ERROR(bpe->add_merge(merges[rank].first, merges[rank].second, static_cast<int32_t>(rank)));
  }

  // An unk_token missing from the vocabulary only fails in `tokenizers` when it is needed;
  // here such a token is simply never produced.
  if (bpe->unk_token_) bpe->unk_id_ = bpe->token_to_id(*bpe->unk_token_);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto id = bpe->token_to_id(name);
    bpe->byte_ids_[b] = id.value_or(-1);
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_r_.size()) return nullptr;
  return vocab_r_[static_cast<size_t>(id)];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out->push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add_symbol = [&](int32_t id) {
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, false});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
  };

  // Initial symbols: one per character, unknown characters through byte fallback or unk.
  int32_t pending_unk = -1;  // an unk not yet added, so that runs can fuse
  std::string with_affixes;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t start = pos;
    pos += utf8_length(static_cast<unsigned char>(word[pos]));
    if (pos > word.size()) pos = word.size();
    std::string_view ch = word.substr(start, pos - start);
    std::string_view key = ch;
    const bool is_first = start == 0, is_last = pos == word.size();
    if ((!is_first && !continuing_subword_prefix_.empty()) || (is_last && !end_of_word_suffix_.empty())) {
      with_affixes.clear();
      if (!is_first) with_affixes += continuing_subword_prefix_;
      with_affixes += ch;
      if (is_last) with_affixes += end_of_word_suffix_;
      key = with_affixes;
    }
    if (auto id = token_to_id(key)) {
      if (pending_unk >= 0) {
        add_symbol(pending_unk);
        pending_unk = -1;
      }
      add_symbol(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (unsigned char b : key) all_bytes = all_bytes && byte_ids_[b] >= 0;
      if (all_bytes) {
        // The reference adds byte tokens without flushing a pending unk first.
        for (unsigned char b : key) add_symbol(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add_symbol(pending_unk);
      if (!(pending_unk >= 0 && fuse_unk_)) pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add_symbol(pending_unk);

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int32_t left) {
    const Symbol& l = symbols[static_cast<size_t>(left)];
    if (l.next < 0) return;
    auto it = merges_.find(pair_key(l.id, symbols[static_cast<size_t>(l.next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const auto& s : symbols) {
    if (!s.removed) out->push_back(s.id);
  }
}

}  // namespace dayzero::tokenizer
