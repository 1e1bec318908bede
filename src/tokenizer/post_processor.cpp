// tokenizer.json post-processors for single sequences (see post_processor.h): every kind is
// reduced to a template of special-id runs around the sequence.
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "tokenizer/json_util.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;

// A template is a list of items: a run of special ids, or the sequence itself (empty ids).
struct TemplateItem {
  bool is_sequence = false;
  std::vector<int32_t> ids;
};

class TemplatePostProcessor final : public PostProcessor {
 public:
  explicit TemplatePostProcessor(std::vector<TemplateItem> items) : items_(std::move(items)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& item : items_) {
      const auto& src = item.is_sequence ? ids : item.ids;
      out.insert(out.end(), src.begin(), src.end());
    }
    return out;
  }

 private:
  std::vector<TemplateItem> items_;
};

class IdentityPostProcessor final : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& part : parts_) ids = part->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

Result<int32_t> pair_id(const json& spec, const char* key, const std::string& context) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return Status::Corrupt(context + ": '" + key + "' is not a [token, id] pair");
  }
  return (*it)[1].get<int32_t>();
}

Result<std::unique_ptr<PostProcessor>> make_template(const json& spec) {
  const std::string context = "TemplateProcessing post_processor";
  auto single = spec.find("single");
  auto specials = spec.find("special_tokens");
  if (single == spec.end() || !single->is_array()) return Status::Corrupt(context + ": missing array 'single'");
  std::vector<TemplateItem> items;
  for (const auto& piece : *single) {
    if (piece.contains("Sequence")) {
      // The single-sequence template names sequence "A"; anything else has no input here.
      const json& seq = piece["Sequence"];
      if (seq.value("id", std::string("A")) == "A") items.push_back({true, {}});
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id")) {
      return Status::Corrupt(context + ": template item is neither Sequence nor SpecialToken");
    }
    std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (specials == spec.end() || !specials->is_object() || !specials->contains(name)) {
      return Status::Corrupt(context + ": special token '" + name + "' is not in 'special_tokens'");
    }
    const json& entry = (*specials)[name];
    if (!entry.contains("ids") || !entry["ids"].is_array()) {
      return Status::Corrupt(context + ": special token '" + name + "' has no 'ids'");
    }
    items.push_back({false, entry["ids"].get<std::vector<int32_t>>()});
  }
  return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(items)));
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> make_post_processor(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<PostProcessor>();
  DZ_ASSIGN_OR_RETURN(std::string type, json_string(spec, "type", "post_processor"));
  if (type == "TemplateProcessing") return make_template(spec);
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new IdentityPostProcessor());
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const std::string context = type + " post_processor";
    DZ_ASSIGN_OR_RETURN(int32_t cls, pair_id(spec, "cls", context));
    DZ_ASSIGN_OR_RETURN(int32_t sep, pair_id(spec, "sep", context));
    std::vector<TemplateItem> items = {{false, {cls}}, {true, {}}, {false, {sep}}};
    return std::unique_ptr<PostProcessor>(new TemplatePostProcessor(std::move(items)));
  }
  if (type == "Sequence") {
    auto it = spec.find("processors");
    if (it == spec.end() || !it->is_array()) return Status::Corrupt("Sequence post_processor: missing array 'processors'");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& item : *it) {
      DZ_ASSIGN_OR_RETURN(auto part, make_post_processor(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PostProcessor>(new SequencePostProcessor(std::move(parts)));
  }
  return Status::Unsupported("post_processor type '" + type + "' is not supported");
}

}  // namespace dayzero::tokenizer
