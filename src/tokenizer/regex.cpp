// PCRE2 wrapper for tokenizer patterns (see regex.h). Compiled once at load, matched from
// many threads: the compiled code is shared read-only, match data is per call.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cstdio>
#include <initializer_list>

#include "core/check.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
};

Regex::~Regex() {
  if (code_ != nullptr) {
    pcre2_code_free(code_->code);
    delete code_;
  }
}

namespace {

// The reference engine (Oniguruma in `tokenizers`) and PCRE2 disagree on a few classes; the
// pattern is rewritten so that PCRE2 matches what Oniguruma would:
//  - \s / \S: Oniguruma's is the Unicode White_Space property; PCRE2's also takes U+180E
//    (MONGOLIAN VOWEL SEPARATOR, a space before Unicode 6.3). Spelled out as kWhiteSpaceList.
//  - \w / \W: Oniguruma's also takes marks (\p{M}), Nl and the joiners.
//  - \p{X}, \d: Oniguruma knows a newer Unicode than the system PCRE2; code points assigned
//    since (new emoji, CJK extensions) are added from unicode_recent.inc.
constexpr std::string_view kWhiteSpaceList =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

struct RecentRange {
  char32_t first;
  char32_t last;
  const char* category;  // two-letter general category in the newer Unicode
};

constexpr RecentRange kRecentRanges[] = {
#include "tokenizer/unicode_recent.inc"
};

bool is_category_name(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "L",  "M",  "N",  "P",  "S",  "Z",  "C",  "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
      "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf",
      "Co", "Cs", "Cn"};
  for (auto known : kNames) {
    if (name == known) return true;
  }
  return false;
}

// PCRE2 class items for the recent code points of the given categories ("L" = all of L*).
std::string recent_items(std::initializer_list<std::string_view> categories) {
  std::string out;
  char buffer[48];
  for (const auto& r : kRecentRanges) {
    bool wanted = false;
    for (auto category : categories) {
      wanted = wanted || (category.size() == 1 ? r.category[0] == category[0] : category == r.category);
    }
    if (!wanted) continue;
    if (r.first == r.last) {
      std::snprintf(buffer, sizeof(buffer), "\\x{%X}", static_cast<unsigned>(r.first));
    } else {
      std::snprintf(buffer, sizeof(buffer), "\\x{%X}-\\x{%X}", static_cast<unsigned>(r.first),
                    static_cast<unsigned>(r.last));
    }
    out += buffer;
  }
  return out;
}

std::string rewrite_for_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t i = 0;
  // Emits class items: bare inside a class, wrapped (and maybe negated) outside.
  auto emit = [&](const std::string& items, bool negated) {
    if (in_class) {
      out += items;
    } else {
      out += negated ? "[^" : "[";
      out += items;
      out += "]";
    }
  };
  while (i < pattern.size()) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char d = pattern[i + 1];
      if (d == 's' || (d == 'S' && !in_class)) {
        emit(std::string(kWhiteSpaceList), d == 'S');
        i += 2;
        continue;
      }
      if (d == 'w' || (d == 'W' && !in_class)) {
        emit("\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}" + recent_items({"L", "M", "Nd", "Nl", "Pc"}),
             d == 'W');
        i += 2;
        continue;
      }
      if (d == 'd' || (d == 'D' && !in_class)) {
        emit("\\p{Nd}" + recent_items({"Nd"}), d == 'D');
        i += 2;
        continue;
      }
      if (d == 'p' || (d == 'P' && !in_class)) {
        std::string_view name;
        size_t next = i + 2;
        if (next < pattern.size() && pattern[next] == '{') {
          size_t close = pattern.find('}', next);
          if (close != std::string_view::npos) {
            name = pattern.substr(next + 1, close - next - 1);
            next = close + 1;
          }
        } else if (next < pattern.size()) {
          name = pattern.substr(next, 1);
          next += 1;
        }
        if (!name.empty() && is_category_name(name)) {
          std::string extra = recent_items({name});
          if (!extra.empty()) {
            emit("\\p{" + std::string(name) + "}" + extra, d == 'P');
            i = next;
            continue;
          }
        }
      }
      out += c;
      out += d;
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];  // a literal ']' first
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string spelled = rewrite_for_pcre2(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    std::string where = spelled == pattern ? "at offset " + std::to_string(error_offset)
                                           : "at offset " + std::to_string(error_offset) + " of its PCRE2 form";
    return Status::InvalidArgument("regex '" + std::string(pattern) + "' " + where + ": " +
                                   reinterpret_cast<const char*>(buffer));
  }
  // JIT is an optimisation only: without it pcre2_match interprets the same code.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->code_ = new Code{code};
  return regex;
}

Result<std::unique_ptr<Regex>> Regex::literal(std::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) escaped += '\\';
    escaped += c;
  }
  return compile(escaped);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  size_t search_from = 0;
  bool has_last_end = false;
  size_t last_end = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (search_from <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data,
                         nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT stack is small; the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // Splitting is not allowed to lose text: a pattern that exhausts PCRE2's limits is fatal.
    DZ_CHECK(rc >= 0, "PCRE2 error " << rc << " matching '" << pattern_ << "' at byte " << search_from
                                     << " of " << text.size());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    size_t start = ovector[0], end = ovector[1];
    if (start == end && has_last_end && last_end == end) {
      if (search_from >= text.size()) break;
      search_from += utf8_length(static_cast<unsigned char>(text[search_from]));
      continue;
    }
    matches.emplace_back(start, end);
    search_from = end;
    last_end = end;
    has_last_end = true;
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace dayzero::tokenizer
