// compressed-tensors' shared quantization_config checks and the ignore list (compressed_tensors.h).
#include "checkpoint/compressed_tensors.h"

#include "core/json.h"
#include "core/strings.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

bool null_or_absent(const json& o, const char* key) { return !o.contains(key) || o[key].is_null(); }

}  // namespace

Status unsupported_key(const std::string& qw, const std::string& key, const json& value, const std::string& want) {
  return Status::Unsupported(qw + "." + key + " " + json_excerpt(value) + " is not supported (" + want + ")");
}

bool IgnoreList::quantizes(const std::string& module) const {
  size_t k = 0;
  for (const std::string& e : ignore) {
    if (e.rfind("re:", 0) == 0) {
      const std::regex re = k < patterns.size() ? patterns[k] : std::regex(e.substr(3));
      ++k;
      if (std::regex_search(module, re, std::regex_constants::match_continuous)) return false;
    } else if (e == module) {
      return false;
    }
  }
  return true;
}

std::string compressed_tensors_format(const json& q) {
  std::string format = q.contains("format") && q["format"].is_string() ? q["format"].get<std::string>() : "";
  if (q.contains("config_groups") && q["config_groups"].is_object() && q["config_groups"].size() == 1) {
    const json& g = q["config_groups"].begin().value();
    if (g.is_object() && g.contains("format") && g["format"].is_string()) format = g["format"].get<std::string>();
  }
  return format;
}

Result<CompressedTensorsGroup> parse_compressed_tensors(const json& q, const std::string& qw) {
  if (!q.is_object()) return Status::InvalidArgument(qw + " is " + std::string(json_kind(q)) + ", not an object");
  if (!q.contains("quant_method") || !q["quant_method"].is_string())
    return Status::InvalidArgument(qw + ".quant_method is missing or not a string");
  if (q["quant_method"] != "compressed-tensors")
    return unsupported_key(qw, "quant_method", q["quant_method"], "compressed-tensors");
  if (!null_or_absent(q, "quantization_status") && q["quantization_status"] != "compressed")
    return unsupported_key(qw, "quantization_status", q["quantization_status"], "compressed");
  if (!null_or_absent(q, "kv_cache_scheme"))
    return unsupported_key(qw, "kv_cache_scheme", q["kv_cache_scheme"], "null: a quantized KV cache is not read");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1)
    return Status::Unsupported(qw + ".config_groups: exactly one group is supported");
  const std::string gk = "config_groups." + q["config_groups"].begin().key();
  const json& g = q["config_groups"].begin().value();
  if (!g.is_object()) return Status::InvalidArgument(qw + "." + gk + " is not an object");
  if (!g.contains("targets") || g["targets"] != json::array({"Linear"}))
    return unsupported_key(qw, gk + ".targets", g.value("targets", json()), "[\"Linear\"]");
  for (const char* k : {"input_activations", "output_activations"})
    if (!null_or_absent(g, k)) return unsupported_key(qw, gk + "." + k, g[k], "null: weights only");
  if (!g.contains("weights") || !g["weights"].is_object())
    return Status::InvalidArgument(qw + "." + gk + ".weights is missing or not an object");
  const json& w = g["weights"];
  const std::string wk = gk + ".weights.";
  if (w.contains("dynamic") && w["dynamic"] != false) return unsupported_key(qw, wk + "dynamic", w["dynamic"], "false");
  for (const char* k : {"actorder", "block_structure"})
    if (!null_or_absent(w, k)) return unsupported_key(qw, wk + k, w[k], "null");
  CompressedTensorsGroup out;
  out.format = compressed_tensors_format(q);
  out.weights = &g["weights"];
  out.weights_key = gk + ".weights";
  if (!null_or_absent(q, "ignore")) {
    if (!q["ignore"].is_array()) return Status::InvalidArgument(qw + ".ignore is not a list");
    for (const json& e : q["ignore"]) {
      if (!e.is_string()) return Status::InvalidArgument(qw + ".ignore holds " + json_excerpt(e) + ", not a string");
      const std::string s = e.get<std::string>();
      if (s.rfind("re:", 0) == 0) {
        try {
          out.ignore.patterns.emplace_back(s.substr(3));
        } catch (const std::regex_error& err) {
          return Status::InvalidArgument(qw + ".ignore pattern " + single_quoted(s) + " does not compile: " + err.what());
        }
      }
      out.ignore.ignore.push_back(s);
    }
  }
  return out;
}

}  // namespace dayzero::checkpoint
