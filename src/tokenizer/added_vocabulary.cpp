// Added-token ids and splitting (see added_vocabulary.h), following added_vocabulary.rs of
// Hugging Face `tokenizers`: find_matches for the match rules, add_tokens for the ids.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

void AddedVocabulary::Matcher::insert(std::string_view key, int32_t id) {
  if (key.empty()) return;
  int32_t node = 0;
  for (unsigned char c : key) {
    auto it = nodes_[static_cast<size_t>(node)].children.find(c);
    if (it == nodes_[static_cast<size_t>(node)].children.end()) {
      nodes_.push_back(Node{});
      int32_t child = static_cast<int32_t>(nodes_.size() - 1);
      nodes_[static_cast<size_t>(node)].children.emplace(c, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  // Of two tokens with the same (normalized) text, the first inserted wins.
  if (nodes_[static_cast<size_t>(node)].id < 0) nodes_[static_cast<size_t>(node)].id = id;
  first_byte_[static_cast<unsigned char>(key[0])] = true;
}

bool AddedVocabulary::Matcher::find(std::string_view text, size_t from, size_t* start, size_t* end,
                                    int32_t* id) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
    int32_t node = 0;
    int32_t best_id = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& children = nodes_[static_cast<size_t>(node)].children;
      auto it = children.find(static_cast<unsigned char>(text[j]));
      if (it == children.end()) break;
      node = it->second;
      if (nodes_[static_cast<size_t>(node)].id >= 0) {
        best_id = nodes_[static_cast<size_t>(node)].id;
        best_end = j + 1;
      }
    }
    if (best_id >= 0) {
      *start = i;
      *end = best_end;
      *id = best_id;
      return true;
    }
  }
  return false;
}

int32_t AddedVocabulary::add(const AddedToken& token, const BpeModel& model) {
  if (token.special) special_contents_.insert(token.content);
  if (auto existing = token_to_id(token.content)) return *existing;
  int32_t id;
  if (auto in_model = model.token_to_id(token.content)) {
    id = *in_model;
  } else {
    const auto model_size = static_cast<int32_t>(model.size());
    if (by_content_.empty()) {
      id = model_size;
    } else {
      id = (max_id_ >= model_size || model_size == 0) ? max_id_ + 1 : model_size;
    }
  }
  by_content_.emplace(token.content, id);
  by_id_[id] = token;
  order_.push_back(id);
  max_id_ = std::max(max_id_, id);
  return id;
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_matcher_ = Matcher();
  normalized_matcher_ = Matcher();
  has_raw_ = has_normalized_ = false;
  // The reference lists special tokens before the others when building its tries.
  std::vector<int32_t> ordered;
  for (int32_t id : order_) {
    if (is_special_content(by_id_[id].content)) ordered.push_back(id);
  }
  for (int32_t id : order_) {
    if (!is_special_content(by_id_[id].content)) ordered.push_back(id);
  }
  for (int32_t id : ordered) {
    const AddedToken& token = by_id_[id];
    if (token.normalized) {
      std::string key = normalizer ? normalizer->normalize(token.content) : token.content;
      normalized_matcher_.insert(key, id);
      has_normalized_ = true;
    } else {
      raw_matcher_.insert(token.content, id);
      has_raw_ = true;
    }
  }
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  return special_contents_.find(content) != special_contents_.end();
}

namespace {

// Code point that ends just before byte `end` of text.
char32_t code_point_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, &start);
}

}  // namespace

void AddedVocabulary::split_with(const Matcher& matcher, const Piece& piece, std::vector<Segment>* out) const {
  const std::string& text = piece.text;
  auto emit_text = [&](size_t start, size_t end) {
    if (end > start) out->push_back({-1, Piece{text.substr(start, end - start), piece.at_origin && start == 0}});
  };
  size_t start_offset = 0;
  size_t search_from = 0;
  size_t match_start = 0, match_end = 0;
  int32_t id = -1;
  while (search_from < text.size() && matcher.find(text, search_from, &match_start, &match_end, &id)) {
    search_from = match_end;
    const AddedToken& token = by_id_.at(id);
    size_t start = match_start, stop = match_end;
    if (token.single_word) {
      bool start_space = start == 0 || !is_word_char(code_point_before(text, start));
      size_t probe = stop;
      bool stop_space = stop == text.size() || !is_word_char(next_code_point(text, &probe));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t prev = new_start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t probe = prev;
        if (!is_white_space(next_code_point(text, &probe))) break;
        new_start = prev;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t probe = stop;
        if (!is_white_space(next_code_point(text, &probe))) break;
        stop = probe;
      }
    }
    emit_text(start_offset, start);
    out->push_back({id, Piece{}});
    start_offset = stop;
  }
  // An rstrip may have run past the end of the last scanned match; never go backwards.
  emit_text(start_offset, text.size());
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, const Normalizer* normalizer) const {
  std::vector<Segment> first;
  Piece whole{std::string(text), true};
  if (has_raw_) {
    split_with(raw_matcher_, whole, &first);
  } else if (!whole.text.empty()) {
    first.push_back({-1, std::move(whole)});
  }
  std::vector<Segment> out;
  out.reserve(first.size());
  for (auto& segment : first) {
    if (segment.id >= 0) {
      out.push_back(std::move(segment));
      continue;
    }
    if (normalizer) segment.piece.text = normalizer->normalize(std::move(segment.piece.text));
    if (has_normalized_) {
      split_with(normalized_matcher_, segment.piece, &out);
    } else if (!segment.piece.text.empty()) {
      out.push_back(std::move(segment));
    }
  }
  return out;
}

}  // namespace dayzero::tokenizer
