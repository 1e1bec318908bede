// tokenizer.json normalizers (see normalizer.h). Each mirrors the Hugging Face `tokenizers`
// component of the same name on the normalized string only.
#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string text) const override { return normalize_unicode(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return to_lower_unicode(text); }
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return strip_accents(text); }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override {
    if (text.empty()) return text;  // an empty piece stays empty, as in `tokenizers`
    return prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string text) const override {
    return replace_all(*pattern_, text, content_);
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_white_space(next_code_point(text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t probe = start;
        if (!is_white_space(next_code_point(text, &probe))) break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return byte_level_encode(text); }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string text) const override {
    for (const auto& part : parts_) text = part->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  DZ_ASSIGN_OR_RETURN(std::string type, json_string(spec, "type", "normalizer"));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "Prepend") {
    DZ_ASSIGN_OR_RETURN(std::string prefix, json_string(spec, "prepend", "Prepend normalizer"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    DZ_ASSIGN_OR_RETURN(auto pattern, make_pattern(spec, "Replace normalizer"));
    DZ_ASSIGN_OR_RETURN(std::string content, json_string(spec, "content", "Replace normalizer"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), std::move(content)));
  }
  if (type == "Strip") {
    DZ_ASSIGN_OR_RETURN(bool left, json_bool(spec, "strip_left", true, "Strip normalizer"));
    DZ_ASSIGN_OR_RETURN(bool right, json_bool(spec, "strip_right", true, "Strip normalizer"));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Sequence") {
    const json* list = spec.contains("normalizers") ? &spec["normalizers"] : nullptr;
    if (list == nullptr || !list->is_array()) {
      return Status::Corrupt("Sequence normalizer: missing array 'normalizers'");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& item : *list) {
      DZ_ASSIGN_OR_RETURN(auto part, make_normalizer(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return Status::Unsupported("normalizer type '" + type + "' is not supported");
}

}  // namespace dayzero::tokenizer
