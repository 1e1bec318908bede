// Streaming parse of tokenizer.json (see tokenizer_json.h): an nlohmann SAX handler that builds
// the JSON tree itself, except below model.vocab and model.merges where it fills vectors.
#include "tokenizer/tokenizer_json.h"

#include "core/json.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;

class Handler final : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson* out) : out_(out) {}
  const std::string& error() const { return error_; }

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) {
      out_->vocab.emplace_back(std::move(key_), static_cast<int64_t>(v));
      return true;
    }
    return scalar(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      if (v > static_cast<number_unsigned_t>(INT64_MAX)) return fail("vocab entry '" + key_ + "' has id out of range");
      out_->vocab.emplace_back(std::move(key_), static_cast<int64_t>(v));
      return true;
    }
    return scalar(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool binary(binary_t&) override { return fail("binary value"); }

  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      size_t space = v.find(' ');
      if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos) {
        return fail("BPE merge " + std::to_string(out_->merges.size()) + ": '" + v.substr(0, 80) + "' is not two tokens");
      }
      out_->merges.emplace_back(v.substr(0, space), v.substr(space + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ >= 2) return fail("BPE merge " + std::to_string(out_->merges.size()) + " has more than two tokens");
      (pair_size_ == 0 ? pair_.first : pair_.second) = std::move(v);
      ++pair_size_;
      return true;
    }
    return scalar(json(std::move(v)));
  }

  bool key(string_t& v) override {
    key_ = std::move(v);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return fail(where() + " holds an object");
    if (at_model_field("vocab")) {
      mode_ = Mode::kVocab;
      out_->has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    return close();
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_size_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom) return fail(where() + " holds an array");
    if (at_model_field("merges")) {
      mode_ = Mode::kMerges;
      out_->has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ != 2) return fail("BPE merge " + std::to_string(out_->merges.size()) + " is not a pair");
      out_->merges.push_back(std::move(pair_));
      pair_ = {};
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    return close();
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return fail(std::string(e.what()).substr(0, 200));
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  std::string where() const {
    if (mode_ == Mode::kVocab) return "vocab entry '" + key_ + "'";
    return "BPE merge " + std::to_string(out_->merges.size());
  }
  // True when the next value is model.<name> of the top-level object.
  bool at_model_field(const char* name) const {
    return stack_.size() == 2 && keys_[1] == "model" && stack_.back()->is_object() && key_ == name;
  }
  bool scalar(json value) {
    if (mode_ == Mode::kVocab) return fail("vocab entry '" + key_ + "' has no integer id");
    if (mode_ != Mode::kDom) return fail(where() + " holds a non-string");
    put(std::move(value));
    return true;
  }
  json* put(json value) {
    if (stack_.empty()) {
      out_->document = std::move(value);
      return &out_->document;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(value));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(value);
    return &slot;
  }
  bool open(json container) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth)
      return fail("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    std::string key = (!stack_.empty() && stack_.back()->is_object()) ? key_ : std::string();
    // Pointers into the parent stay valid: nothing is added to it until this container closes.
    stack_.push_back(put(std::move(container)));
    keys_.push_back(std::move(key));
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  TokenizerJson* out_;
  Mode mode_ = Mode::kDom;
  std::vector<json*> stack_;       // open containers of the document
  std::vector<std::string> keys_;  // the key of each open container in its parent object
  std::string key_;                // the last key read
  std::pair<std::string, std::string> pair_;
  int pair_size_ = 0;
  std::string error_;
};

}  // namespace

Result<TokenizerJson> parse_tokenizer_json(const std::string& text) {
  TokenizerJson out;
  Handler handler(&out);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &handler);
  } catch (const json::exception& e) {
    return Status::Corrupt(std::string("tokenizer.json: ") + e.what());
  }
  if (!ok) return Status::Corrupt("tokenizer.json: " + (handler.error().empty() ? std::string("parse failed") : handler.error()));
  return out;
}

}  // namespace dayzero::tokenizer
