// tokenizer.json pre-tokenizers (see pre_tokenizer.h). The split logic follows
// NormalizedString::split of Hugging Face `tokenizers`: the pattern's matches and the gaps
// between them cover the piece, then the behaviour decides what is merged or removed.
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

struct Span {
  size_t start = 0, end = 0;
  bool flag = false;  // is a pattern match, then (after the behaviour) "remove"
};

// The matches of `pattern` and the gaps between them, covering text (one empty gap for "").
std::vector<Span> find_spans(const Regex& pattern, std::string_view text, bool invert) {
  std::vector<Span> spans;
  if (text.empty()) {
    spans.push_back({0, 0, invert});
    return spans;
  }
  size_t prev = 0;
  for (auto [start, end] : pattern.find_all(text)) {
    if (prev != start) spans.push_back({prev, start, invert});
    spans.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});
  return spans;
}

// Applies a split behaviour to spans whose flag says "is a match"; returned flags say "remove".
std::vector<Span> apply_behavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      return spans;
    case SplitBehavior::kIsolated:
      for (auto& s : spans) s.flag = false;
      return spans;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.flag == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.start, s.end, false});
        }
        previous_match = s.flag;
      }
      return out;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.flag && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.start, s.end, false});
        }
        previous_match = s.flag;
      }
      return out;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !out.empty()) {
          out.back().start = it->start;
        } else {
          out.push_back({it->start, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
  }
  return spans;
}

// Cuts one piece along the kept spans, appending the non-empty sub-pieces to *out.
void emit_spans(const Piece& piece, const std::vector<Span>& spans, std::vector<Piece>* out) {
  for (const auto& s : spans) {
    if (s.flag || s.end == s.start) continue;
    out->push_back({piece.text.substr(s.start, s.end - s.start), piece.at_origin && s.start == 0});
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces->size() * 2);
    for (const auto& piece : *pieces) {
      emit_spans(piece, apply_behavior(find_spans(*pattern_, piece.text, invert_), behavior_), &out);
    }
    *pieces = std::move(out);
  }

 private:
  std::unique_ptr<Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}

  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces->size() * 2);
    for (auto& piece : *pieces) {
      if (add_prefix_space_ && !piece.text.empty() && piece.text.front() != ' ') piece.text.insert(0, 1, ' ');
      if (split_) {
        auto spans = find_spans(*split_, piece.text, /*invert=*/false);
        emit_spans(piece, apply_behavior(std::move(spans), SplitBehavior::kIsolated), &out);
      } else {
        out.push_back(std::move(piece));
      }
    }
    for (auto& piece : out) piece.text = byte_level_encode(piece.text);
    *pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> split_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split,
                        std::unique_ptr<Regex> space, std::unique_ptr<Regex> replacement_regex)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split),
        space_(std::move(space)), replacement_regex_(std::move(replacement_regex)) {}

  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces->size() * 2);
    for (auto& piece : *pieces) {
      piece.text = replace_all(*space_, piece.text, replacement_);
      bool starts_with_replacement = piece.text.compare(0, replacement_.size(), replacement_) == 0;
      bool prepend = (scheme_ == PrependScheme::kAlways) ||
                     (scheme_ == PrependScheme::kFirst && piece.at_origin);
      if (prepend && !starts_with_replacement) piece.text.insert(0, replacement_);
      if (split_) {
        auto spans = find_spans(*replacement_regex_, piece.text, /*invert=*/false);
        emit_spans(piece, apply_behavior(std::move(spans), SplitBehavior::kMergedWithNext), &out);
      } else {
        out.push_back(std::move(piece));
      }
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<Regex> space_;              // " "
  std::unique_ptr<Regex> replacement_regex_;  // the replacement character
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    for (const auto& part : parts_) part->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<SplitBehavior> parse_behavior(const json& spec, const std::string& context) {
  auto it = spec.find("behavior");
  if (it == spec.end() || it->is_null()) return SplitBehavior::kIsolated;
  if (!it->is_string()) return Status::Corrupt(context + ": 'behavior' is not a string");
  std::string name = it->get<std::string>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return Status::Unsupported(context + ": split behavior '" + name + "' is not supported");
}

Result<std::unique_ptr<PreTokenizer>> make_regex_split(const std::string& pattern, SplitBehavior behavior,
                                                       bool invert) {
  DZ_ASSIGN_OR_RETURN(auto regex, Regex::compile(pattern));
  return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(regex), behavior, invert));
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<PreTokenizer>();
  DZ_ASSIGN_OR_RETURN(std::string type, json_string(spec, "type", "pre_tokenizer"));
  const std::string context = type + " pre_tokenizer";
  if (type == "Split") {
    DZ_ASSIGN_OR_RETURN(auto pattern, make_pattern(spec, context));
    DZ_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(spec, context));
    DZ_ASSIGN_OR_RETURN(bool invert, json_bool(spec, "invert", false, context));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(pattern), behavior, invert));
  }
  if (type == "ByteLevel") {
    DZ_ASSIGN_OR_RETURN(bool add_prefix_space, json_bool(spec, "add_prefix_space", true, context));
    DZ_ASSIGN_OR_RETURN(bool use_regex, json_bool(spec, "use_regex", true, context));
    std::unique_ptr<Regex> split;
    if (use_regex) {
      DZ_ASSIGN_OR_RETURN(split, Regex::compile(kGpt2SplitPattern));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(add_prefix_space, std::move(split)));
  }
  if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81";  // U+2581
    if (spec.contains("replacement") && spec["replacement"].is_string()) {
      replacement = spec["replacement"].get<std::string>();
    }
    PrependScheme scheme = PrependScheme::kAlways;
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      std::string name = spec["prepend_scheme"].get<std::string>();
      if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return Status::Unsupported(context + ": prepend_scheme '" + name + "' is not supported");
      }
    } else {
      // Files written before prepend_scheme existed say add_prefix_space instead.
      DZ_ASSIGN_OR_RETURN(bool add_prefix_space, json_bool(spec, "add_prefix_space", true, context));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    DZ_ASSIGN_OR_RETURN(bool split, json_bool(spec, "split", true, context));
    DZ_ASSIGN_OR_RETURN(auto space, Regex::literal(" "));
    DZ_ASSIGN_OR_RETURN(auto replacement_regex, Regex::literal(replacement));
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(
        replacement, scheme, split, std::move(space), std::move(replacement_regex)));
  }
  if (type == "Digits") {
    DZ_ASSIGN_OR_RETURN(bool individual, json_bool(spec, "individual_digits", false, context));
    return make_regex_split(individual ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated, false);
  }
  if (type == "Whitespace") {
    return make_regex_split(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, /*invert=*/true);
  }
  if (type == "WhitespaceSplit") {
    return make_regex_split(R"(\s+)", SplitBehavior::kRemoved, false);
  }
  if (type == "Punctuation") {
    DZ_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(spec, context));
    return make_regex_split(R"([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}])", behavior, false);
  }
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) {
      return Status::Corrupt("Sequence pre_tokenizer: missing array 'pretokenizers'");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& item : *it) {
      DZ_ASSIGN_OR_RETURN(auto part, make_pre_tokenizer(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return Status::Unsupported("pre_tokenizer type '" + type + "' is not supported");
}

}  // namespace dayzero::tokenizer
