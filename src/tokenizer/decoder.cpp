// tokenizer.json decoders (see decoder.h), each following the `tokenizers` component of the
// same name, including its handling of invalid UTF-8 (U+FFFD) and of the first token.
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include <utility>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;

const char kReplacementChar[] = "\xEF\xBF\xBD";

class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      // A token with a character outside the byte-level alphabet (an added token such as
      // "<｜begin▁of▁sentence｜>") contributes its own UTF-8 bytes.
      std::string mapped;
      bool all_mapped = true;
      size_t pos = 0;
      while (pos < token.size()) {
        int b = byte_level_byte(next_code_point(token, &pos));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      bytes += all_mapped ? mapped : token;
    }
    return {make_valid_utf8(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) token = replace_all(*pattern_, token, content_);
    return tokens;
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Parses "<0xAB>" into 0xAB; -1 for anything else.
int parse_byte_token(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(token[3]), lo = hex(token[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (auto& token : tokens) {
      int b = parse_byte_token(token);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    return out;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    return {joined};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) {
      std::vector<size_t> bounds;  // byte offset of each character, then the end
      size_t pos = 0;
      std::vector<char32_t> chars;
      while (pos < token.size()) {
        bounds.push_back(pos);
        chars.push_back(next_code_point(token, &pos));
      }
      bounds.push_back(token.size());
      size_t start_cut = 0;
      for (size_t i = 0; i < chars.size() && i < start_; ++i) {
        if (chars[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      token = token.substr(bounds[start_cut], bounds[stop_cut] - bounds[start_cut]);
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first) : replacement_(replacement), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      size_t pos = 0;
      const std::string& token = tokens[i];
      while (pos < token.size()) {
        size_t begin = pos;
        char32_t cp = next_code_point(token, &pos);
        if (cp == replacement_) {
          // `tokenizers` drops every replacement character of the first token.
          if (!(i == 0 && strip_first_)) out.push_back(' ');
        } else {
          out.append(token, begin, pos - begin);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string replacement = (i + 1 == tokens.size()) ? "" : " ";
      std::string out;
      size_t pos = 0;
      const std::string& token = tokens[i];
      while (!suffix_.empty()) {
        size_t hit = token.find(suffix_, pos);
        if (hit == std::string::npos) break;
        out.append(token, pos, hit - pos);
        out += replacement;
        pos = hit + suffix_.size();
      }
      out.append(token, pos);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& part : parts_) tokens = part->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

Result<char32_t> single_char(const json& spec, const char* key, const std::string& context) {
  DZ_ASSIGN_OR_RETURN(std::string text, json_string(spec, key, context));
  size_t pos = 0;
  if (text.empty() || !is_valid_utf8(text)) return Status::Corrupt(context + ": '" + key + "' is not one character");
  char32_t cp = next_code_point(text, &pos);
  if (pos != text.size()) return Status::Corrupt(context + ": '" + key + "' is not one character");
  return cp;
}

Result<size_t> json_count(const json& spec, const char* key, const std::string& context) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return size_t{0};
  if (!it->is_number_unsigned() && !it->is_number_integer()) {
    return Status::Corrupt(context + ": '" + key + "' is not a count");
  }
  long long v = it->get<long long>();
  if (v < 0) return Status::Corrupt(context + ": '" + key + "' is negative");
  return static_cast<size_t>(v);
}

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Decoder>();
  DZ_ASSIGN_OR_RETURN(std::string type, json_string(spec, "type", "decoder"));
  const std::string context = type + " decoder";
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Replace") {
    DZ_ASSIGN_OR_RETURN(auto pattern, make_pattern(spec, context));
    DZ_ASSIGN_OR_RETURN(std::string content, json_string(spec, "content", context));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), std::move(content)));
  }
  if (type == "Strip") {
    DZ_ASSIGN_OR_RETURN(char32_t content, single_char(spec, "content", context));
    DZ_ASSIGN_OR_RETURN(size_t start, json_count(spec, "start", context));
    DZ_ASSIGN_OR_RETURN(size_t stop, json_count(spec, "stop", context));
    return std::unique_ptr<Decoder>(new StripDecoder(content, start, stop));
  }
  if (type == "Metaspace") {
    char32_t replacement = 0x2581;
    if (spec.contains("replacement")) {
      DZ_ASSIGN_OR_RETURN(replacement, single_char(spec, "replacement", context));
    }
    bool strip_first = true;
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      strip_first = spec["prepend_scheme"].get<std::string>() != "never";
    } else {
      DZ_ASSIGN_OR_RETURN(strip_first, json_bool(spec, "add_prefix_space", true, context));
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, strip_first));
  }
  if (type == "BPEDecoder") {
    std::string suffix = "</w>";
    if (spec.contains("suffix") && spec["suffix"].is_string()) suffix = spec["suffix"].get<std::string>();
    return std::unique_ptr<Decoder>(new BpeSuffixDecoder(std::move(suffix)));
  }
  if (type == "Sequence") {
    auto it = spec.find("decoders");
    if (it == spec.end() || !it->is_array()) return Status::Corrupt("Sequence decoder: missing array 'decoders'");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& item : *it) {
      DZ_ASSIGN_OR_RETURN(auto part, make_decoder(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return Status::Unsupported("decoder type '" + type + "' is not supported");
}

}  // namespace dayzero::tokenizer
