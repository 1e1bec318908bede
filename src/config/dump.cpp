// The dump side of the run config: the point vocabulary, DumpSelection's questions
// ("is this tensor wanted?") and dump.dir placeholder expansion. It writes nothing; dump/ does.
#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "config/run_config.h"
#include "core/clock.h"

namespace dayzero::config {
namespace {

bool parse_index(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

}  // namespace

const std::vector<std::string>& dump_point_names() {
  static const std::vector<std::string> kNames = {
      "embed",    "attn_norm",  "attn_out", "ffn_norm",         "router_logits", "topk_ids",    "ffn_out",
      "layer_out", "final_norm", "logits",  "vision_layer_out", "projector_out", "merged_embed",
      "vision_embed", "vision_selected", "vision_merged",
      "index_topk_ids", "hc_head"};
  return kNames;
}

bool is_dump_point(std::string_view point) {
  const auto& names = dump_point_names();
  return std::find(names.begin(), names.end(), point) != names.end();
}

bool DumpSelection::wants_layer(int layer) const {
  if (!enabled || layer < 0) return false;
  return all_layers || std::binary_search(layers.begin(), layers.end(), layer);
}

bool DumpSelection::wants_point(std::string_view point) const {
  if (!enabled || !is_dump_point(point)) return false;
  return all_points || std::find(points.begin(), points.end(), point) != points.end();
}

bool DumpSelection::wants_prefill() const { return enabled && phase != DumpPhase::kDecode; }
bool DumpSelection::wants_decode() const { return enabled && phase != DumpPhase::kPrefill; }

bool DumpSelection::wants_key(std::string_view key) const {
  // "vision.layers.<L>.layer_out" -> point vision_layer_out at layer L.
  constexpr std::string_view kVision = "vision.layers.";
  constexpr std::string_view kLayers = "layers.";
  bool vision = false;
  std::string_view rest;
  if (key.substr(0, kVision.size()) == kVision) {
    vision = true;
    rest = key.substr(kVision.size());
  } else if (key.substr(0, kLayers.size()) == kLayers) {
    rest = key.substr(kLayers.size());
  } else {
    // Layer-less points; a per-layer point without its layer is not a key.
    if (key == "vision.embed") return wants_point("vision_embed");
    if (key == "vision.selected") return wants_point("vision_selected");
    if (key == "vision.merged") return wants_point("vision_merged");
    static constexpr std::string_view kTop[] = {"embed", "hc_head", "final_norm", "logits", "projector_out",
                                                "merged_embed"};
    return std::find(std::begin(kTop), std::end(kTop), key) != std::end(kTop) && wants_point(key);
  }
  const size_t dot = rest.find('.');
  int layer = 0;
  if (dot == std::string_view::npos || !parse_index(rest.substr(0, dot), &layer)) return false;
  const std::string_view name = rest.substr(dot + 1);
  if (vision) return name == "layer_out" && wants_layer(layer) && wants_point("vision_layer_out");
  static constexpr std::string_view kPerLayer[] = {"attn_norm", "attn_out", "ffn_norm", "router_logits",
                                                   "topk_ids",  "ffn_out",  "layer_out", "index_topk_ids"};
  return std::find(std::begin(kPerLayer), std::end(kPerLayer), name) != std::end(kPerLayer) &&
         wants_layer(layer) && wants_point(name);
}

const std::vector<std::string>& job_id_env_vars() {
  static const std::vector<std::string> kVars = {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID",
                                                 "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"};
  return kVars;
}

std::string job_id_from_env() {
  for (const std::string& var : job_id_env_vars()) {
    const char* v = std::getenv(var.c_str());
    if (v == nullptr || *v == '\0') continue;
    std::string id = v;
    for (char& c : id) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-';
      if (!ok) c = '_';
    }
    return id;
  }
  return "local";
}

Result<std::string> expand_dump_dir(const std::string& pattern, const std::string& config_stem, int64_t time_ns) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '}') {
      if (i + 1 < pattern.size() && pattern[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return Status::InvalidArgument("lone '}' at offset " + std::to_string(i) + " in \"" + pattern +
                                     "\" (write }} for a literal brace)");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = pattern.find('}', i + 1);
    if (close == std::string::npos)
      return Status::InvalidArgument("unclosed '{' at offset " + std::to_string(i) + " in \"" + pattern + "\"");
    const std::string name = pattern.substr(i + 1, close - i - 1);
    if (name == "config") {
      out += config_stem;
    } else if (name == "time") {
      out += utc_stamp(time_ns);
    } else if (name == "jobid") {
      out += job_id_from_env();
    } else {
      return Status::InvalidArgument("unknown placeholder {" + name + "} in \"" + pattern +
                                     "\" (known: {config}, {time}, {jobid})");
    }
    i = close;
  }
  return out;
}

}  // namespace dayzero::config
