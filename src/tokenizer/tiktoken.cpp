// tiktoken BPE (see tiktoken.h): the rank file parser, the PCRE2 spelling of Kimi's pattern,
// and the encode loop of tiktoken's CoreBPE::_encode_native with its byte_pair_merge, done
// with a min-heap instead of tiktoken's rescans (same picks, O(n log n) on long pieces).
#include "tokenizer/tiktoken.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <queue>
#include <tuple>

#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

// Source: moonshotai/Kimi-K2-Instruct on the Hugging Face Hub, tokenization_kimi.py,
// TikTokenTokenizer.pat_str = "|".join([...]) of the eight raw strings below (the same list
// ships with Kimi-K2-Base, Kimi-Linear and Moonlight).
const char kKimiPattern[] =
    R"([\p{Han}]+)"
    "|"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"(\p{N}{1,3})"
    "|"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*)"
    "|"
    R"(\s*[\r\n]+)"
    "|"
    R"(\s+(?!\S))"
    "|"
    R"(\s+)";

namespace {

// Script=Han as tiktoken's Rust regex (regex-syntax, Unicode 16) reads \p{Han}: every code
// point, probed through tiktoken 0.14, folded into ranges. Not Script_Extensions: the CJK
// punctuation 、。「」 and the kana marks are Common there.
constexpr char kHanRanges[] =
    "\\x{2E80}-\\x{2E99}\\x{2E9B}-\\x{2EF3}\\x{2F00}-\\x{2FD5}\\x{3005}\\x{3007}\\x{3021}-\\x{3029}"
    "\\x{3038}-\\x{303B}\\x{3400}-\\x{4DBF}\\x{4E00}-\\x{9FFF}\\x{F900}-\\x{FA6D}\\x{FA70}-\\x{FAD9}"
    "\\x{16FE2}-\\x{16FE3}\\x{16FF0}-\\x{16FF1}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B739}"
    "\\x{2B740}-\\x{2B81D}\\x{2B820}-\\x{2CEA1}\\x{2CEB0}-\\x{2EBE0}\\x{2EBF0}-\\x{2EE5D}"
    "\\x{2F800}-\\x{2FA1D}\\x{30000}-\\x{3134A}\\x{31350}-\\x{323AF}";

void replace_every(std::string* text, std::string_view from, std::string_view to) {
  size_t at = 0;
  while ((at = text->find(from, at)) != std::string::npos) {
    text->replace(at, from.size(), to);
    at += to.size();
  }
}

// PCRE2 before 10.45 has no class intersection; [X&&[^Y]] is "an X that is not a Y".
std::string rewrite_intersections(std::string_view pattern) {
  std::string out(pattern);
  size_t at = 0;
  while ((at = out.find("&&[^", at)) != std::string::npos) {
    size_t open = out.rfind('[', at);
    while (open != std::string::npos && open > 0 && out[open - 1] == '\\') open = out.rfind('[', open - 1);
    const size_t close = out.find("]]", at);
    if (open == std::string::npos || close == std::string::npos) break;
    const std::string items = out.substr(open + 1, at - open - 1);
    const std::string excluded = out.substr(at + 4, close - at - 4);
    const std::string spelled = "(?:(?![" + excluded + "])[" + items + "])";
    out.replace(open, close + 2 - open, spelled);
    at = open + spelled.size();
  }
  return out;
}

std::string escape_literal(std::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) escaped += '\\';
    escaped += c;
  }
  return escaped;
}

// Standard base64 with '=' padding, as Python's base64.b64decode reads tiktoken files;
// nullopt for anything else (stray characters, bad length, misplaced padding).
std::optional<std::string> decode_base64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int n_pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++n_pad;
        continue;
      }
      if (n_pad > 0) return std::nullopt;  // data after padding
      v[k] = value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const uint32_t bits = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                          (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>((bits >> 16) & 0xFF);
    if (n_pad < 2) out += static_cast<char>((bits >> 8) & 0xFF);
    if (n_pad < 1) out += static_cast<char>(bits & 0xFF);
  }
  return out;
}

std::string quoted_token(std::string_view text) {
  constexpr size_t kMax = 40;
  std::string out = "'" + std::string(text.substr(0, kMax));
  if (text.size() > kMax) out += "...";
  return out + "'";
}

}  // namespace

std::string kimi_pattern_for_pcre2() {
  std::string pattern = rewrite_intersections(kKimiPattern);
  replace_every(&pattern, "\\p{Han}", kHanRanges);
  return pattern;
}

Result<std::unique_ptr<TiktokenModel>> TiktokenModel::create(std::string_view model_text, const std::string& file_name,
                                                             std::vector<TiktokenSpecial> specials, int32_t n_reserved,
                                                             std::string_view pattern) {
  std::unique_ptr<TiktokenModel> model(new TiktokenModel());
  struct Entry {
    std::string bytes;
    int64_t rank;
    size_t line;
  };
  std::vector<Entry> entries;
  size_t line_number = 0;
  size_t at = 0;
  while (at < model_text.size()) {
    size_t end = model_text.find('\n', at);
    if (end == std::string_view::npos) end = model_text.size();
    std::string_view line = model_text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    const std::string where = file_name + " line " + std::to_string(line_number);
    // Python's str.split(): fields separated by runs of whitespace, '\r' included.
    std::vector<std::string_view> fields;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      const size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      if (i > start) fields.push_back(line.substr(start, i - start));
    }
    if (fields.empty()) continue;
    if (fields.size() != 2) {
      return Status::Corrupt(where + ": expected '<base64 token> <rank>', got " + std::to_string(fields.size()) +
                             " fields");
    }
    auto bytes = decode_base64(fields[0]);
    if (!bytes) return Status::Corrupt(where + ": token " + quoted_token(fields[0]) + " is not valid base64");
    int64_t rank = 0;
    bool digits = fields[1].size() <= 10;
    for (char c : fields[1]) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) rank = rank * 10 + (c - '0');
    }
    if (!digits || rank > INT32_MAX) {
      return Status::Corrupt(where + ": rank " + quoted_token(fields[1]) + " is not an integer in [0, 2^31)");
    }
    entries.push_back(Entry{std::move(*bytes), rank, line_number});
  }
  if (entries.empty()) return Status::Corrupt(file_name + ": no tokens");

  // Kimi numbers its special tokens from len(mergeable_ranks) on, so the ranks must be exactly
  // 0 .. n-1: a larger one would take a special token's id.
  const size_t n = entries.size();
  model->bytes_by_rank_.resize(n);
  model->ranks_.reserve(n);
  std::vector<bool> used(n, false);
  for (auto& entry : entries) {
    const std::string where = file_name + " line " + std::to_string(entry.line);
    if (entry.rank >= static_cast<int64_t>(n)) {
      return Status::Corrupt(where + ": rank " + std::to_string(entry.rank) + " is not below the number of tokens, " +
                             std::to_string(n));
    }
    if (used[entry.rank]) return Status::Corrupt(where + ": rank " + std::to_string(entry.rank) + " appears twice");
    if (!model->ranks_.emplace(entry.bytes, static_cast<int32_t>(entry.rank)).second) {
      return Status::Corrupt(where + ": token " + quoted_token(byte_level_encode(entry.bytes)) + " appears twice");
    }
    used[entry.rank] = true;
    model->bytes_by_rank_[entry.rank] = std::move(entry.bytes);
  }
  for (int b = 0; b < 256; ++b) {
    if (!model->ranks_.contains(std::string_view(std::string(1, static_cast<char>(b))))) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      return Status::Corrupt(file_name + ": byte " + hex + " has no rank (every single byte needs one)");
    }
  }

  // Kimi numbers its special tokens from len(mergeable_ranks) on and names the unnamed ones.
  const int32_t first_special = static_cast<int32_t>(n);
  std::vector<bool> named(static_cast<size_t>(std::max(n_reserved, 0)), false);
  for (const auto& special : specials) {
    if (special.id >= first_special && special.id - first_special < n_reserved) named[special.id - first_special] = true;
  }
  for (int32_t k = 0; k < n_reserved; ++k) {
    if (named[static_cast<size_t>(k)]) continue;
    const int32_t id = first_special + k;
    specials.push_back(TiktokenSpecial{id, "<|reserved_token_" + std::to_string(id) + "|>", true});
  }
  std::sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  model->id_limit_ = first_special;
  for (size_t k = 0; k < specials.size(); ++k) {
    const auto& special = specials[k];
    if (special.content.empty()) return Status::Corrupt("special token " + std::to_string(special.id) + " is empty");
    if (special.id < 0) return Status::Corrupt("special token " + quoted_token(special.content) + " has a negative id");
    if (special.id < first_special) {
      return Status::Corrupt("special token " + quoted_token(special.content) + ": id " + std::to_string(special.id) +
                             " is a rank of " + file_name);
    }
    if (k > 0 && specials[k - 1].id == special.id) {
      return Status::Corrupt("special tokens " + quoted_token(specials[k - 1].content) + " and " + quoted_token(special.content) +
                             " share id " + std::to_string(special.id));
    }
    if (!model->special_ids_.emplace(special.content, special.id).second) {
      return Status::Corrupt("special token " + quoted_token(special.content) + " appears twice");
    }
    model->id_limit_ = std::max(model->id_limit_, special.id + 1);
  }
  model->specials_ = std::move(specials);

  if (!model->specials_.empty()) {
    std::vector<const std::string*> by_length;
    for (const auto& special : model->specials_) by_length.push_back(&special.content);
    // PCRE2 takes the first alternative that matches: longest first makes it leftmost-longest.
    std::stable_sort(by_length.begin(), by_length.end(),
                     [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
    std::string alternation;
    for (const std::string* content : by_length) {
      if (!alternation.empty()) alternation += '|';
      alternation += escape_literal(make_valid_utf8(*content));
    }
    DZ_ASSIGN_OR_RETURN(model->special_regex_, Regex::compile(alternation));
  }
  DZ_ASSIGN_OR_RETURN(model->pattern_, Regex::compile(pattern));
  return model;
}

std::optional<int32_t> TiktokenModel::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  if (it == ranks_.end()) return std::nullopt;
  return it->second;
}

void TiktokenModel::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (auto whole = rank_of(piece)) {
    out->push_back(*whole);
    return;
  }
  // Parts are byte ranges [start[i], start[next[i]]) in a linked list; pair_rank[i] is the rank
  // of part i joined with the part after it. tiktoken merges the lowest rank, leftmost first.
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> next(n), prev(n), pair_rank(n, -1), version(n, 0);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1;  // n marks the end
    prev[i] = i - 1;
  }
  auto end_of = [&](int32_t i) { return next[i]; };  // parts start at their index
  auto rank_pair = [&](int32_t i) -> int32_t {
    if (i < 0 || next[i] >= n) return -1;
    auto rank = rank_of(piece.substr(i, end_of(next[i]) - i));
    return rank ? *rank : -1;
  };
  using Candidate = std::tuple<int32_t, int32_t, int32_t>;  // rank, start, version
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (int32_t i = 0; i + 1 < n; ++i) {
    pair_rank[i] = rank_pair(i);
    if (pair_rank[i] >= 0) heap.emplace(pair_rank[i], i, 0);
  }
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    auto [rank, i, stamp] = heap.top();
    heap.pop();
    if (!alive[i] || stamp != version[i] || pair_rank[i] != rank) continue;
    const int32_t gone = next[i];
    alive[gone] = false;
    next[i] = next[gone];
    if (next[i] < n) prev[next[i]] = i;
    for (int32_t j : {prev[i], i}) {
      if (j < 0) continue;
      ++version[j];
      pair_rank[j] = rank_pair(j);
      if (pair_rank[j] >= 0) heap.emplace(pair_rank[j], j, version[j]);
    }
  }
  for (int32_t i = 0; i < n; i = next[i]) {
    // Every part is a byte or a merge result, so it has a rank (create() checked the bytes).
    out->push_back(*rank_of(piece.substr(i, next[i] - i)));
  }
}

void TiktokenModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  auto encode_ordinary = [&](std::string_view span) {
    for (auto [start, end] : pattern_->find_all(span)) encode_piece(span.substr(start, end - start), out);
  };
  if (!special_regex_) {
    encode_ordinary(text);
    return;
  }
  size_t done = 0;
  for (auto [start, end] : special_regex_->find_all(text)) {
    encode_ordinary(text.substr(done, start - done));
    out->push_back(special_ids_.find(text.substr(start, end - start))->second);
    done = end;
  }
  encode_ordinary(text.substr(done));
}

std::string TiktokenModel::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_by_rank_.size()) {
      bytes += bytes_by_rank_[id];
    } else if (const TiktokenSpecial* special = find_special(id)) {
      if (!(skip_special && special->special)) bytes += special->content;
    }
  }
  return make_valid_utf8(bytes);
}

std::optional<int32_t> TiktokenModel::special_id(std::string_view content) const {
  auto it = special_ids_.find(content);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

const TiktokenSpecial* TiktokenModel::find_special(int32_t id) const {
  auto it = std::lower_bound(specials_.begin(), specials_.end(), id,
                             [](const TiktokenSpecial& s, int32_t value) { return s.id < value; });
  return it != specials_.end() && it->id == id ? &*it : nullptr;
}

std::optional<int32_t> TiktokenModel::token_to_id(std::string_view token) const {
  if (auto id = special_id(token)) return id;
  if (!is_valid_utf8(token)) return std::nullopt;
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const int byte = byte_level_byte(next_code_point(token, &pos));
    if (byte < 0) return std::nullopt;
    bytes += static_cast<char>(byte);
  }
  return rank_of(bytes);
}

std::string TiktokenModel::id_to_token(int32_t id) const {
  if (id >= 0 && static_cast<size_t>(id) < bytes_by_rank_.size()) {
    return byte_level_encode(bytes_by_rank_[id]);
  }
  if (const TiktokenSpecial* special = find_special(id)) return special->content;
  return std::string();
}

}  // namespace dayzero::tokenizer
