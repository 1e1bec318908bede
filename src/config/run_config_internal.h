// Private to src/config: the YAML walker (Parser), shared so its sections fit two files of < 600 lines each.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.h"

namespace dayzero::config::parse_internal {

// Defined in run_config.cpp.
size_t edit_distance(std::string_view a, std::string_view b);
std::string join(const std::vector<std::string>& v, const char* sep);

// Walks the YAML tree; every error names the source, the position and the key path.
class Parser {
 public:
  explicit Parser(RunConfig* cfg) : cfg_(cfg) {}

  Status parse_root(const YAML::Node& root);

 private:
  Status error(const YAML::Node& at, const std::string& path, const std::string& what) const {
    std::string where = cfg_->source_name;
    const YAML::Mark m = at.Mark();
    if (m.line >= 0) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    return Status::InvalidArgument(where + ": " + path + ": " + what);
  }
  void note(const YAML::Node& at, const std::string& path) {
    const YAML::Mark m = at.Mark();
    if (m.line >= 0) cfg_->key_positions[path] = {m.line + 1, m.column + 1};
  }
  static std::string child(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string kind(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Null: return "nothing";
      default: return (quoted(n) ? "the quoted string \"" : "\"") + n.Scalar() + "\"";
    }
  }
  static bool given(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }
  // A quoted scalar ("16") is text even when it looks like a number.
  static bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

  // Checks that n is a mapping whose keys are unique scalars from `allowed`.
  Status check_map(const YAML::Node& n, const std::string& path,
                   const std::vector<std::string>& allowed) {
    if (!n.IsMap()) return error(n, path.empty() ? "(top level)" : path, "expected a mapping, got " + kind(n));
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      // Copies: the iterator's pair is a temporary proxy.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      if (!key.IsScalar()) return error(key, path.empty() ? "(top level)" : path, "keys must be plain names");
      const std::string& k = key.Scalar();
      const std::string kp = child(path, k);
      for (const UnbuiltKey& u : unbuilt_keys())
        if (kp == u.path) return error(key, kp, std::string("cannot take effect: ") + u.reason + "; remove the key");
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        std::string best;
        size_t best_d = 3;
        for (const auto& a : allowed) {
          const size_t d = edit_distance(k, a);
          if (d < best_d) best_d = d, best = a;
        }
        const std::string hint = best.empty() ? "expected one of: " + join(allowed, ", ")
                                              : "did you mean " + child(path, best) + "?";
        return error(key, kp, "unknown key; " + hint);
      }
      if (!seen.insert(k).second) return error(key, kp, "key given twice");
      note(value.IsNull() ? key : value, kp);
    }
    return Status::Ok();
  }

  Status get_string(const YAML::Node& n, const std::string& path, std::string* out) {
    if (!n.IsScalar()) return error(n, path, "expected a string, got " + kind(n));
    *out = n.Scalar();
    return Status::Ok();
  }
  Status get_int64(const YAML::Node& n, const std::string& path, int64_t* out) {
    if (!n.IsScalar() || quoted(n)) return error(n, path, "expected an integer, got " + kind(n));
    std::string_view s = n.Scalar();
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    if (ec == std::errc::result_out_of_range) return error(n, path, "integer " + n.Scalar() + " is out of range");
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
      return error(n, path, "expected an integer, got " + kind(n));
    return Status::Ok();
  }
  Status get_int(const YAML::Node& n, const std::string& path, int* out) {
    int64_t v = 0;
    DZ_RETURN_IF_ERROR(get_int64(n, path, &v));
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      return error(n, path, "integer " + n.Scalar() + " is out of range");
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status get_double(const YAML::Node& n, const std::string& path, double* out) {
    if (!n.IsScalar() || quoted(n)) return error(n, path, "expected a number, got " + kind(n));
    std::string_view s = n.Scalar();
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty() || !std::isfinite(*out))
      return error(n, path, "expected a finite number, got " + kind(n));
    return Status::Ok();
  }
  Status get_bool(const YAML::Node& n, const std::string& path, bool* out) {
    if (!n.IsScalar() || quoted(n) || !YAML::convert<bool>::decode(n, *out))
      return error(n, path, "expected true or false, got " + kind(n));
    return Status::Ok();
  }
  template <class E>
  Status get_enum(const YAML::Node& n, const std::string& path,
                  const std::vector<std::pair<std::string, E>>& names, E* out) {
    std::vector<std::string> spellings;
    for (const auto& [s, e] : names) spellings.push_back(s);
    if (n.IsScalar()) {
      for (const auto& [s, e] : names) {
        if (n.Scalar() == s) {
          *out = e;
          return Status::Ok();
        }
      }
    }
    return error(n, path, "expected one of " + join(spellings, " | ") + ", got " + kind(n));
  }
  // Optional int where "auto" also means "not given".
  Status get_opt_int(const YAML::Node& n, const std::string& path, std::optional<int>* out) {
    if (!given(n) || (n.IsScalar() && n.Scalar() == "auto" && !quoted(n))) return Status::Ok();
    int v = 0;
    DZ_RETURN_IF_ERROR(get_int(n, path, &v));
    *out = v;
    return Status::Ok();
  }
  Status get_opt_double(const YAML::Node& n, const std::string& path, std::optional<double>* out) {
    if (!given(n)) return Status::Ok();
    double v = 0;
    DZ_RETURN_IF_ERROR(get_double(n, path, &v));
    *out = v;
    return Status::Ok();
  }
  // A string or a list of strings.
  Status get_strings(const YAML::Node& n, const std::string& path, std::vector<std::string>* out) {
    out->clear();
    if (!given(n)) return Status::Ok();
    if (n.IsScalar()) return get_string(n, path, &out->emplace_back());
    if (!n.IsSequence()) return error(n, path, "expected a string or a list of strings, got " + kind(n));
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string ip = path + "[" + std::to_string(i) + "]";
      note(n[i], ip);
      DZ_RETURN_IF_ERROR(get_string(n[i], ip, &out->emplace_back()));
    }
    return Status::Ok();
  }
  // Token ids: an integer or a list of integers, each in [0, 2^31).
  Status get_token_ids(const YAML::Node& n, const std::string& path, std::vector<int32_t>* out) {
    out->clear();
    auto one = [&](const YAML::Node& t, const std::string& tp) -> Status {
      int64_t v = 0;
      DZ_RETURN_IF_ERROR(get_int64(t, tp, &v));
      if (v < 0 || v > std::numeric_limits<int32_t>::max())
        return error(t, tp, "token id " + t.Scalar() + " is outside [0, 2^31)");
      out->push_back(static_cast<int32_t>(v));
      return Status::Ok();
    };
    if (n.IsScalar()) return one(n, path);
    if (!n.IsSequence()) return error(n, path, "expected a list of token ids, got " + kind(n));
    for (size_t i = 0; i < n.size(); ++i) DZ_RETURN_IF_ERROR(one(n[i], path + "[" + std::to_string(i) + "]"));
    return Status::Ok();
  }

  Status parse_model(const YAML::Node& n);
  Status parse_parallel(const YAML::Node& n);
  Status parse_topology(const YAML::Node& n);
  Status parse_limits(const YAML::Node& n);
  Status parse_prompts(const YAML::Node& n);
  Status parse_prompt(const YAML::Node& n, const std::string& path, Prompt* p);
  Status parse_generate(const YAML::Node& n);
  Status parse_dump(const YAML::Node& n);
  Status parse_activations(const YAML::Node& n, const std::string& path, DumpSelection* sel);
  Status parse_watchdog(const YAML::Node& n);
  Status parse_preflight(const YAML::Node& n);
  Status parse_runtime(const YAML::Node& n);
  Status parse_checklist(const YAML::Node& n);
  Status parse_serve(const YAML::Node& n);  // serve.cpp
  Status parse_debug(const YAML::Node& n);

  RunConfig* cfg_;
};

}  // namespace dayzero::config::parse_internal
