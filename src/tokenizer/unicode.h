// UTF-8 helpers for the tokenizer: code point decoding, lossy repair of invalid input, the
// GPT-2 byte-to-character table of byte-level BPE, and the few Unicode classes the
// tokenizer.json components need (whitespace, word characters, Unicode normal forms).
// Not a general Unicode library: classes come from utf8proc and follow Rust's definitions;
// normal forms leave alone the marks that `tokenizers`' older tables do not know.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dayzero::tokenizer {

// Decodes the code point at text[*pos] and advances *pos past it.
// REQUIRES: *pos < text.size() and text is valid UTF-8 (see make_valid_utf8).
char32_t next_code_point(std::string_view text, size_t* pos);

// Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t utf8_length(unsigned char lead);

void append_utf8(std::string* out, char32_t cp);

// Replaces every maximal invalid UTF-8 subsequence with U+FFFD, the way Rust's
// String::from_utf8_lossy does (and so the way `tokenizers` decodes byte-level output).
std::string make_valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// Byte-level BPE alphabet: each byte maps to one printable character (GPT-2's
// bytes_to_unicode); byte_level_char returns its UTF-8 encoding.
const std::string& byte_level_char(unsigned char byte);
// The byte a byte-level character stands for, or -1 when cp is not in the alphabet.
int byte_level_byte(char32_t cp);
// Maps every byte of text to its byte-level character.
std::string byte_level_encode(std::string_view text);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_white_space(char32_t cp);
// Rust regex's \w: alphabetic, marks, decimal numbers, connector punctuation, join controls.
bool is_word_char(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// The normal form as `tokenizers` computes it: code points listed in
// unicode_normalization_gaps.inc (too new for its tables) stay where they are and block
// reordering and composition across them. REQUIRES: text is valid UTF-8.
std::string normalize_unicode(std::string_view text, NormalForm form);
std::string to_lower_unicode(std::string_view text);
// Drops non-spacing marks (category Mn), as the StripAccents normalizer does.
std::string strip_accents(std::string_view text);

}  // namespace dayzero::tokenizer
