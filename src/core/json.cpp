// parse_json_limited: an nlohmann SAX handler that builds the tree itself, counting depth and
// keys per object; read_regular_file: open_regular_file (core/file.h), then bounded reads.
#include "core/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "core/file.h"

namespace dayzero {
namespace {

using nlohmann::json;

std::string cut(std::string s, size_t max_chars) {
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

class LimitedSax final : public nlohmann::json_sax<json> {
 public:
  LimitedSax(json* root, const JsonParseOptions& o) : root_(root), o_(o) {}
  const std::string& error() const { return error_; }

  bool null() override { return put(json(nullptr)) != nullptr; }
  bool boolean(bool v) override { return put(json(v)) != nullptr; }
  bool number_integer(number_integer_t v) override { return put(json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return put(json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return put(json(v)) != nullptr; }
  bool string(string_t& v) override { return put(json(std::move(v))) != nullptr; }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool key(string_t& k) override {
    if (o_.reject_duplicate_keys && !keys_.back().insert(k).second)
      return fail("key '" + cut(k, 80) + "' appears twice in one object");
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return fail(cut(e.what(), 200));
  }

 private:
  bool fail(std::string m) {
    if (error_.empty()) error_ = std::move(m);
    return false;
  }
  json* put(json v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool open(json container) {
    if (static_cast<int>(stack_.size()) >= o_.max_depth)
      return fail("nesting deeper than " + std::to_string(o_.max_depth) + " levels");
    const bool is_object = container.is_object();
    // Pointers into the parent stay valid: nothing is added to it until this container closes.
    stack_.push_back(put(std::move(container)));
    if (is_object && o_.reject_duplicate_keys) keys_.emplace_back();
    return true;
  }
  bool close() {
    if (stack_.back()->is_object() && o_.reject_duplicate_keys) keys_.pop_back();
    stack_.pop_back();
    return true;
  }

  json* root_;
  JsonParseOptions o_;
  std::vector<json*> stack_;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object (duplicate check)
  std::string key_;
  std::string error_;
};

}  // namespace

Result<json> parse_json_limited(std::string_view text, const std::string& source_name,
                                const JsonParseOptions& options) {
  json root;
  LimitedSax sax(&root, options);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    return Status::Corrupt(source_name + ": malformed JSON: " + cut(e.what(), 200));
  }
  if (!ok) {
    return Status::Corrupt(source_name + ": malformed JSON: " +
                           (sax.error().empty() ? std::string("parse failed") : sax.error()));
  }
  return root;
}

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes) {
  DZ_ASSIGN_OR_RETURN(const RegularFile file, open_regular_file(path));
  const int fd = file.fd;
  if (file.size > max_bytes) {
    ::close(fd);
    return Status::InvalidArgument(path + ": " + std::to_string(file.size) + " bytes exceed the limit of " +
                                   std::to_string(max_bytes));
  }
  std::string out(static_cast<size_t>(file.size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IoError(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;  // shrank while reading
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

Result<json> read_json_file(const std::string& path, const JsonParseOptions& options) {
  DZ_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path, kMaxJsonFileBytes));
  return parse_json_limited(text, path, options);
}

const char* json_kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "a binary value";
  }
}

std::string json_excerpt(const json& j, size_t max_chars) {
  if (j.is_object()) return "an object of " + std::to_string(j.size());
  if (j.is_array()) {
    // A short list of scalars is shown as written (compact), anything else by its size.
    bool flat = j.size() <= 8;
    for (const json& e : j) flat = flat && !e.is_structured();
    if (flat) {
      std::string s = "[";
      for (size_t i = 0; i < j.size(); ++i) s += (i ? "," : "") + j[i].dump();
      s += "]";
      if (s.size() <= max_chars) return s;
    }
    return "an array of " + std::to_string(j.size());
  }
  if (j.is_string()) return "\"" + cut(j.get<std::string>(), max_chars) + "\"";
  return cut(j.dump(), max_chars);  // a scalar: not recursive
}

}  // namespace dayzero
