// UTF-8 helpers, the byte-level alphabet and Unicode classes (see unicode.h).
// Classification and normal forms come from utf8proc; nothing here allocates per code point
// beyond the output strings.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <cstdlib>
#include <memory>

namespace dayzero::tokenizer {

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

char32_t next_code_point(std::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = *pos;
  unsigned char c = s[i];
  size_t n = utf8_length(c);
  if (i + n > text.size()) n = 1;
  char32_t cp;
  switch (n) {
    case 1: cp = c; break;
    case 2: cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); break;
    case 3: cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu); break;
    default:
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
           (s[i + 3] & 0x3Fu);
  }
  *pos = i + n;
  return cp;
}

void append_utf8(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when invalid; *consumed is set to the
// length of the maximal invalid subpart (at least 1) in that case.
size_t valid_sequence_length(const unsigned char* s, size_t size, size_t i, size_t* consumed) {
  unsigned char c = s[i];
  *consumed = 1;
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= size) {
      *consumed = k;
      return 0;
    }
    unsigned char b = s[i + k];
    unsigned char l = (k == 1) ? lo : 0x80;
    unsigned char h = (k == 1) ? hi : 0xBF;
    if (b < l || b > h) {
      *consumed = k;
      return 0;
    }
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, consumed = 0;
  while (i < bytes.size()) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s, bytes.size(), i, &consumed);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string make_valid_utf8(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0, consumed = 0;
  while (i < bytes.size()) {
    size_t n = valid_sequence_length(s, bytes.size(), i, &consumed);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += consumed;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> byte_to_char;
  std::array<int, 324> char_to_byte;  // every alphabet code point is below 256 + 68
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables = [] {
    ByteLevelTables t;
    t.char_to_byte.fill(-1);
    // GPT-2: printable Latin-1 bytes stand for themselves, the rest are shifted past 255.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(&t.byte_to_char[b], cp);
      t.char_to_byte[cp] = b;
    }
    return t;
  }();
  return tables;
}

}  // namespace

const std::string& byte_level_char(unsigned char byte) { return byte_level_tables().byte_to_char[byte]; }

int byte_level_byte(char32_t cp) {
  const auto& t = byte_level_tables();
  return cp < t.char_to_byte.size() ? t.char_to_byte[cp] : -1;
}

std::string byte_level_encode(std::string_view text) {
  const auto& t = byte_level_tables();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char c : text) out += t.byte_to_char[c];
  return out;
}

bool is_white_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

namespace {

// Marks and composites newer than the normalizer tables of `tokenizers`, which leaves them
// alone (class 0, no decomposition), sorted.
constexpr char32_t kNormalizationGaps[] = {
#include "tokenizer/unicode_normalization_gaps.inc"
};

bool is_normalization_gap(char32_t cp) {
  return std::binary_search(std::begin(kNormalizationGaps), std::end(kNormalizationGaps), cp);
}

std::string normalize_segment(std::string_view text, NormalForm form);

}  // namespace

std::string normalize_unicode(std::string_view text, NormalForm form) {
  // A code point the reference does not know behaves as a starter that composes with nothing,
  // so it splits the text into runs normalized independently, kept as is in between.
  std::string out;
  size_t run_start = 0, pos = 0;
  bool has_gap = false;
  while (pos < text.size()) {
    size_t start = pos;
    char32_t cp = next_code_point(text, &pos);
    if (cp < kNormalizationGaps[0] || !is_normalization_gap(cp)) continue;
    has_gap = true;
    out += normalize_segment(text.substr(run_start, start - run_start), form);
    out.append(text.substr(start, pos - start));
    run_start = pos;
  }
  if (!has_gap) return normalize_segment(text, form);
  out += normalize_segment(text.substr(run_start), form);
  return out;
}

namespace {

std::string normalize_segment(std::string_view text, NormalForm form) {
  if (text.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);  // only on invalid UTF-8, which callers exclude
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string to_lower_unicode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = next_code_point(text, &pos);
    if (cp == 0x130) {  // Rust's full lowercase mapping of 'İ' is two code points
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(&out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  return out;
}

std::string strip_accents(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    char32_t cp = next_code_point(text, &pos);
    if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_MN) continue;
    out.append(text.substr(start, pos - start));
  }
  return out;
}

}  // namespace dayzero::tokenizer
