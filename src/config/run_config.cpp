// Run config YAML -> RunConfig: shapes, types, key names and enum spellings, with the line and
// column of each mistake. Value ranges and cross-key rules are validate()'s (validate.cpp).
// yaml-cpp exceptions are caught here and never leave this file.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "config/run_config.h"
#include "topology/topology.h"

namespace dayzero::config {
namespace {

namespace fs = std::filesystem;

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (base_dir.empty() || p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

// Parses "all"-free layer specs: "7", "0-3", "0-3,7, 9-10". Returns false with *why on error.
bool parse_layer_ranges(std::string_view s, std::vector<int>* out, std::string* why) {
  constexpr int kMaxLayer = 1 << 16;
  auto trim = [](std::string_view t) {
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    return t;
  };
  auto to_int = [](std::string_view t, int* v) {
    if (t.empty()) return false;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && p == t.data() + t.size();
  };
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    std::string_view item = trim(s.substr(start, comma - start));
    start = comma + 1;
    int lo = 0, hi = 0;
    const size_t dash = item.find('-', 1);  // position 0 would be a minus sign
    const bool ok = dash == std::string_view::npos
                        ? (to_int(item, &lo) && (hi = lo, true))
                        : to_int(trim(item.substr(0, dash)), &lo) && to_int(trim(item.substr(dash + 1)), &hi);
    if (!ok) {
      *why = "\"" + std::string(item) + "\" is not a layer index or a range like 0-3";
      return false;
    }
    if (lo < 0 || hi < 0) {
      *why = "layer indices must be >= 0, got \"" + std::string(item) + "\"";
      return false;
    }
    if (hi < lo || hi >= kMaxLayer) {
      *why = "\"" + std::string(item) + "\" is not an increasing range below " + std::to_string(kMaxLayer);
      return false;
    }
    for (int l = lo; l <= hi; ++l) out->push_back(l);
  }
  return true;
}

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
  Status parse_runtime(const YAML::Node& n);
  Status parse_checklist(const YAML::Node& n);
  Status parse_debug(const YAML::Node& n);

  RunConfig* cfg_;
};

Status Parser::parse_root(const YAML::Node& root) {
  if (!given(root)) return Status::InvalidArgument(cfg_->source_name + ": the run config is empty");
  DZ_RETURN_IF_ERROR(check_map(root, "", {"model", "backend", "comm", "parallel", "topology", "limits",
                                          "prompts", "generate", "dump", "watchdog", "runtime", "checklist",
                                          "debug"}));
  if (!given(root["model"])) return error(root, "model", "missing required section (model: {path: ...})");
  DZ_RETURN_IF_ERROR(parse_model(root["model"]));
  if (given(root["backend"]))
    DZ_RETURN_IF_ERROR(get_enum<Backend>(root["backend"], "backend",
                                         {{"auto", Backend::kAuto}, {"cpu", Backend::kCpu}, {"cuda", Backend::kCuda}},
                                         &cfg_->backend));
  if (given(root["comm"]))
    DZ_RETURN_IF_ERROR(get_enum<CommKind>(
        root["comm"], "comm", {{"auto", CommKind::kAuto}, {"mpi", CommKind::kMpi}, {"nccl", CommKind::kNccl}},
        &cfg_->comm));
  if (given(root["parallel"])) DZ_RETURN_IF_ERROR(parse_parallel(root["parallel"]));
  if (given(root["topology"])) DZ_RETURN_IF_ERROR(parse_topology(root["topology"]));
  if (given(root["limits"])) DZ_RETURN_IF_ERROR(parse_limits(root["limits"]));
  if (!given(root["prompts"])) return error(root, "prompts", "missing required list of prompts (at least one)");
  DZ_RETURN_IF_ERROR(parse_prompts(root["prompts"]));
  if (given(root["generate"])) DZ_RETURN_IF_ERROR(parse_generate(root["generate"]));
  if (given(root["dump"])) DZ_RETURN_IF_ERROR(parse_dump(root["dump"]));
  if (given(root["watchdog"])) DZ_RETURN_IF_ERROR(parse_watchdog(root["watchdog"]));
  if (given(root["runtime"])) DZ_RETURN_IF_ERROR(parse_runtime(root["runtime"]));
  if (given(root["checklist"])) DZ_RETURN_IF_ERROR(parse_checklist(root["checklist"]));
  if (given(root["debug"])) DZ_RETURN_IF_ERROR(parse_debug(root["debug"]));
  return Status::Ok();
}

Status Parser::parse_model(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "model", {"path", "dtype", "weights_on_device"}));
  ModelConfig& m = cfg_->model;
  if (!given(n["path"])) return error(n, "model.path", "missing required key (the checkpoint folder)");
  DZ_RETURN_IF_ERROR(get_string(n["path"], "model.path", &m.path_as_written));
  if (m.path_as_written.empty()) return error(n["path"], "model.path", "must not be empty");
  m.path = resolve_path(cfg_->base_dir, m.path_as_written);
  if (given(n["dtype"])) {
    DType d = DType::kF32;
    DZ_RETURN_IF_ERROR(get_enum<DType>(
        n["dtype"], "model.dtype", {{"float32", DType::kF32}, {"bfloat16", DType::kBF16}, {"float16", DType::kF16}},
        &d));
    m.dtype = d;
  }
  if (given(n["weights_on_device"]))
    DZ_RETURN_IF_ERROR(get_enum<WeightsOnDevice>(n["weights_on_device"], "model.weights_on_device",
                                                 {{"as_stored", WeightsOnDevice::kAsStored},
                                                  {"bfloat16", WeightsOnDevice::kBF16},
                                                  {"float32", WeightsOnDevice::kF32}},
                                                 &m.weights_on_device));
  return Status::Ok();
}

Status Parser::parse_parallel(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "parallel", {"dp", "pp", "tp", "ep", "etp"}));
  ParallelConfig& p = cfg_->parallel;
  DZ_RETURN_IF_ERROR(get_opt_int(n["dp"], "parallel.dp", &p.dp));
  DZ_RETURN_IF_ERROR(get_opt_int(n["pp"], "parallel.pp", &p.pp));
  DZ_RETURN_IF_ERROR(get_opt_int(n["tp"], "parallel.tp", &p.tp));
  DZ_RETURN_IF_ERROR(get_opt_int(n["ep"], "parallel.ep", &p.ep));
  DZ_RETURN_IF_ERROR(get_opt_int(n["etp"], "parallel.etp", &p.etp));
  return Status::Ok();
}

Status Parser::parse_topology(const YAML::Node& n) {
  std::vector<std::string> allowed = topology::run_config_keys();
  allowed.push_back("file");
  DZ_RETURN_IF_ERROR(check_map(n, "topology", allowed));
  TopologyConfig& t = cfg_->topology;
  YAML::Node keys = YAML::Clone(n);
  if (given(n["file"])) {
    std::string file;
    DZ_RETURN_IF_ERROR(get_string(n["file"], "topology.file", &file));
    t.file = resolve_path(cfg_->base_dir, file);
  }
  keys.remove("file");
  // The values are read and checked by the topology's own parser, the one `plan --topology` uses.
  auto parsed = topology::parse_keys(keys, "topology.", topology::run_config_keys());
  if (!parsed.ok()) {
    std::string where = cfg_->source_name;
    const YAML::Mark m = n.Mark();
    if (m.line >= 0) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    return Status::InvalidArgument(where + ": " + parsed.status().message());
  }
  t.keys = *parsed;
  return Status::Ok();
}

Status Parser::parse_limits(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "limits", {"max_prompt_tokens", "max_image_pixels"}));
  if (given(n["max_prompt_tokens"]))
    DZ_RETURN_IF_ERROR(get_int64(n["max_prompt_tokens"], "limits.max_prompt_tokens", &cfg_->limits.max_prompt_tokens));
  if (given(n["max_image_pixels"]))
    DZ_RETURN_IF_ERROR(get_int64(n["max_image_pixels"], "limits.max_image_pixels", &cfg_->limits.max_image_pixels));
  return Status::Ok();
}

Status Parser::parse_prompts(const YAML::Node& n) {
  if (!n.IsSequence()) return error(n, "prompts", "expected a list of prompts, got " + kind(n));
  if (n.size() == 0) return error(n, "prompts", "at least one prompt is required");
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = "prompts[" + std::to_string(i) + "]";
    note(n[i], path);
    DZ_RETURN_IF_ERROR(parse_prompt(n[i], path, &cfg_->prompts.emplace_back()));
  }
  return Status::Ok();
}

Status Parser::parse_prompt(const YAML::Node& n, const std::string& path, Prompt* p) {
  DZ_RETURN_IF_ERROR(check_map(n, path, {"id", "text", "tokens", "images", "expect", "reference"}));
  if (!given(n["id"])) return error(n, path + ".id", "missing required key (a unique name for the prompt)");
  DZ_RETURN_IF_ERROR(get_string(n["id"], path + ".id", &p->id));
  if (given(n["text"])) DZ_RETURN_IF_ERROR(get_string(n["text"], path + ".text", &p->text.emplace()));
  if (given(n["tokens"])) DZ_RETURN_IF_ERROR(get_token_ids(n["tokens"], path + ".tokens", &p->tokens.emplace()));
  DZ_RETURN_IF_ERROR(get_strings(n["images"], path + ".images", &p->images_as_written));
  for (const auto& img : p->images_as_written) p->images.push_back(resolve_path(cfg_->base_dir, img));
  if (given(n["reference"])) DZ_RETURN_IF_ERROR(get_string(n["reference"], path + ".reference", &p->reference.emplace()));
  const YAML::Node& e = n["expect"];
  if (given(e)) {
    const std::string ep = path + ".expect";
    DZ_RETURN_IF_ERROR(check_map(e, ep, {"contains", "not_contains", "first_tokens"}));
    DZ_RETURN_IF_ERROR(get_strings(e["contains"], ep + ".contains", &p->expect.contains));
    DZ_RETURN_IF_ERROR(get_strings(e["not_contains"], ep + ".not_contains", &p->expect.not_contains));
    if (given(e["first_tokens"]))
      DZ_RETURN_IF_ERROR(get_token_ids(e["first_tokens"], ep + ".first_tokens", &p->expect.first_tokens));
  }
  return Status::Ok();
}

Status Parser::parse_generate(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "generate", {"max_new_tokens", "seed", "stop_at_eos", "top_k_record", "max_batch"}));
  GenerateConfig& g = cfg_->generate;
  if (given(n["max_new_tokens"])) DZ_RETURN_IF_ERROR(get_int(n["max_new_tokens"], "generate.max_new_tokens", &g.max_new_tokens));
  if (given(n["seed"])) {
    int64_t s = 0;
    DZ_RETURN_IF_ERROR(get_int64(n["seed"], "generate.seed", &s));
    if (s < 0) return error(n["seed"], "generate.seed", "must be >= 0, got " + n["seed"].Scalar());
    g.seed = static_cast<uint64_t>(s);
  }
  if (given(n["stop_at_eos"])) DZ_RETURN_IF_ERROR(get_bool(n["stop_at_eos"], "generate.stop_at_eos", &g.stop_at_eos));
  if (given(n["top_k_record"])) DZ_RETURN_IF_ERROR(get_int(n["top_k_record"], "generate.top_k_record", &g.top_k_record));
  if (given(n["max_batch"])) DZ_RETURN_IF_ERROR(get_int(n["max_batch"], "generate.max_batch", &g.max_batch));
  return Status::Ok();
}

Status Parser::parse_dump(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "dump", {"enabled", "dir", "activations", "event_log", "timeline"}));
  DumpConfig& d = cfg_->dump;
  if (given(n["event_log"]))
    DZ_RETURN_IF_ERROR(get_enum<EventLogMode>(n["event_log"], "dump.event_log",
                                              {{"full", EventLogMode::kFull}, {"off", EventLogMode::kOff}}, &d.event_log));
  if (given(n["timeline"]))
    DZ_RETURN_IF_ERROR(get_enum<TimelineMode>(n["timeline"], "dump.timeline",
                                              {{"full", TimelineMode::kFull}, {"phases", TimelineMode::kPhases}}, &d.timeline));
  if (given(n["enabled"])) DZ_RETURN_IF_ERROR(get_bool(n["enabled"], "dump.enabled", &d.enabled));
  if (given(n["dir"])) DZ_RETURN_IF_ERROR(get_string(n["dir"], "dump.dir", &d.dir));
  if (given(n["activations"])) DZ_RETURN_IF_ERROR(parse_activations(n["activations"], "dump.activations", &d.activations));
  if (!d.enabled) d.activations.enabled = false;  // nothing is dumped, so nothing is wanted
  return Status::Ok();
}

Status Parser::parse_activations(const YAML::Node& n, const std::string& path, DumpSelection* sel) {
  DZ_RETURN_IF_ERROR(check_map(n, path, {"enabled", "layers", "points", "phase", "mode"}));
  sel->enabled = true;
  if (given(n["enabled"])) DZ_RETURN_IF_ERROR(get_bool(n["enabled"], path + ".enabled", &sel->enabled));

  const YAML::Node& layers = n["layers"];
  const std::string lp = path + ".layers";
  if (given(layers) && !(layers.IsScalar() && layers.Scalar() == "all")) {
    sel->all_layers = false;
    std::vector<YAML::Node> items;
    if (layers.IsSequence()) {
      for (size_t i = 0; i < layers.size(); ++i) items.push_back(layers[i]);
    } else {
      items.push_back(layers);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string ip = layers.IsSequence() ? lp + "[" + std::to_string(i) + "]" : lp;
      if (!items[i].IsScalar())
        return error(items[i], ip, "expected all, a layer index, a range like \"0-3,7\" or a list of them, got " + kind(items[i]));
      std::string why;
      if (!parse_layer_ranges(items[i].Scalar(), &sel->layers, &why)) return error(items[i], ip, why);
    }
    std::sort(sel->layers.begin(), sel->layers.end());
    sel->layers.erase(std::unique(sel->layers.begin(), sel->layers.end()), sel->layers.end());
  }

  const YAML::Node& points = n["points"];
  const std::string pp = path + ".points";
  if (given(points) && !(points.IsScalar() && points.Scalar() == "all")) {
    sel->all_points = false;
    DZ_RETURN_IF_ERROR(get_strings(points, pp, &sel->points));
    for (size_t i = 0; i < sel->points.size(); ++i) {
      if (!is_dump_point(sel->points[i])) {
        const YAML::Node& at = points.IsSequence() ? points[i] : points;
        return error(at, points.IsSequence() ? pp + "[" + std::to_string(i) + "]" : pp,
                     "unknown point \"" + sel->points[i] + "\"; expected all or some of: " +
                         join(dump_point_names(), ", "));
      }
    }
  }
  if (given(n["phase"]))
    DZ_RETURN_IF_ERROR(get_enum<DumpPhase>(
        n["phase"], path + ".phase",
        {{"prefill", DumpPhase::kPrefill}, {"decode", DumpPhase::kDecode}, {"both", DumpPhase::kBoth}}, &sel->phase));
  if (given(n["mode"]))
    DZ_RETURN_IF_ERROR(get_enum<DumpMode>(n["mode"], path + ".mode",
                                          {{"full", DumpMode::kFull}, {"stats", DumpMode::kStats}}, &sel->mode));
  return Status::Ok();
}

Status Parser::parse_watchdog(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "watchdog", {"collective_timeout_s", "phase_timeout_s", "ring_events"}));
  WatchdogConfig& w = cfg_->watchdog;
  if (given(n["ring_events"])) DZ_RETURN_IF_ERROR(get_int64(n["ring_events"], "watchdog.ring_events", &w.ring_events));
  if (given(n["collective_timeout_s"]))
    DZ_RETURN_IF_ERROR(get_double(n["collective_timeout_s"], "watchdog.collective_timeout_s", &w.collective_timeout_s));
  if (given(n["phase_timeout_s"]))
    DZ_RETURN_IF_ERROR(get_double(n["phase_timeout_s"], "watchdog.phase_timeout_s", &w.phase_timeout_s));
  return Status::Ok();
}

Status Parser::parse_checklist(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "checklist", {"first_token_text_s", "first_token_image_s"}));
  ChecklistConfig& c = cfg_->checklist;
  for (const auto& [key, value] : {std::pair<const char*, double*>{"first_token_text_s", &c.first_token_text_s},
                                   {"first_token_image_s", &c.first_token_image_s}}) {
    if (!given(n[key])) continue;
    const std::string path = std::string("checklist.") + key;
    DZ_RETURN_IF_ERROR(get_double(n[key], path, value));
    if (!(*value > 0)) return error(n[key], path, "must be a number of seconds > 0, got " + n[key].Scalar());
  }
  return Status::Ok();
}

Status Parser::parse_debug(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "debug", {"perturb", "stall", "image_patterns"}));
  if (given(n["image_patterns"])) {
    const YAML::Node l = n["image_patterns"];
    if (!l.IsSequence()) return error(l, "debug.image_patterns", "must be a list of {prompt, seed}");
    for (size_t i = 0; i < l.size(); ++i) {
      const std::string path = "debug.image_patterns[" + std::to_string(i) + "]";
      DZ_RETURN_IF_ERROR(check_map(l[i], path, {"prompt", "seed"}));
      ImagePatternConfig ip;
      if (!given(l[i]["prompt"])) return error(l[i], path + ".prompt", "missing required key (a prompt id)");
      DZ_RETURN_IF_ERROR(get_string(l[i]["prompt"], path + ".prompt", &ip.prompt));
      if (given(l[i]["seed"])) DZ_RETURN_IF_ERROR(get_int(l[i]["seed"], path + ".seed", &ip.seed));
      cfg_->debug.image_patterns.push_back(ip);
    }
  }
  if (given(n["perturb"])) {
    const YAML::Node p = n["perturb"];
    DZ_RETURN_IF_ERROR(check_map(p, "debug.perturb", {"point", "scale", "repetition"}));
    PerturbConfig pc;
    if (!given(p["point"])) return error(p, "debug.perturb.point", "missing required key (a dump point, e.g. layers.3.ffn_out)");
    DZ_RETURN_IF_ERROR(get_string(p["point"], "debug.perturb.point", &pc.point));
    if (!given(p["scale"])) return error(p, "debug.perturb.scale", "missing required key (e.g. 1.001)");
    DZ_RETURN_IF_ERROR(get_double(p["scale"], "debug.perturb.scale", &pc.scale));
    if (given(p["repetition"])) {
      DZ_RETURN_IF_ERROR(get_int(p["repetition"], "debug.perturb.repetition", &pc.repetition.emplace()));
      if (*pc.repetition < 1)
        return error(p["repetition"], "debug.perturb.repetition", "must be >= 1 (the first repetition is 1)");
    }
    cfg_->debug.perturb = pc;
  }
  if (!given(n["stall"])) return Status::Ok();
  const YAML::Node st = n["stall"];
  DZ_RETURN_IF_ERROR(check_map(st, "debug.stall", {"rank", "before"}));
  if (!given(st["rank"])) return error(st, "debug.stall.rank", "missing required key (the world rank that stalls)");
  if (!given(st["before"]))
    return error(st, "debug.stall.before", "missing required key (e.g. \"tp all_reduce #40\")");
  StallConfig s;
  DZ_RETURN_IF_ERROR(get_int(st["rank"], "debug.stall.rank", &s.rank));
  DZ_RETURN_IF_ERROR(get_string(st["before"], "debug.stall.before", &s.before));
  if (s.rank < 0) return error(st["rank"], "debug.stall.rank", "must be >= 0, got " + std::to_string(s.rank));
  const Status parsed = parse_stall_target(s.before, &s);
  if (!parsed.ok()) return error(st["before"], "debug.stall.before", parsed.message());
  cfg_->debug.stall = s;
  return Status::Ok();
}

Status Parser::parse_runtime(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "runtime", {"threads", "staging_mib", "headroom_mib"}));
  DZ_RETURN_IF_ERROR(get_opt_int(n["staging_mib"], "runtime.staging_mib", &cfg_->runtime.staging_mib));
  DZ_RETURN_IF_ERROR(get_opt_int(n["headroom_mib"], "runtime.headroom_mib", &cfg_->runtime.headroom_mib));
  if (cfg_->runtime.headroom_mib && *cfg_->runtime.headroom_mib < 0)
    return error(n["headroom_mib"], "runtime.headroom_mib", "must be >= 0 MiB");
  return get_opt_int(n["threads"], "runtime.threads", &cfg_->runtime.threads);
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "?";
}
const char* comm_name(CommKind c) {
  switch (c) {
    case CommKind::kAuto: return "auto";
    case CommKind::kMpi: return "mpi";
    case CommKind::kNccl: return "nccl";
  }
  return "?";
}
const char* weights_on_device_name(WeightsOnDevice w) {
  switch (w) {
    case WeightsOnDevice::kAsStored: return "as_stored";
    case WeightsOnDevice::kBF16: return "bfloat16";
    case WeightsOnDevice::kF32: return "float32";
  }
  return "?";
}
const char* dump_phase_name(DumpPhase p) {
  switch (p) {
    case DumpPhase::kPrefill: return "prefill";
    case DumpPhase::kDecode: return "decode";
    case DumpPhase::kBoth: return "both";
  }
  return "?";
}
const char* dump_mode_name(DumpMode m) {
  switch (m) {
    case DumpMode::kFull: return "full";
    case DumpMode::kStats: return "stats";
  }
  return "?";
}

Status parse_stall_target(const std::string& before, StallConfig* s) {
  static const std::vector<std::string> kGroups = {"world", "tp", "pp", "dp", "ep", "etp", "env", "setup"};
  std::istringstream in(before);
  std::string group, op, seq, extra;
  in >> group >> op >> seq;
  const bool more = static_cast<bool>(in >> extra);
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("\"" + before + "\": " + why +
                                   "; expected \"<group kind> <op> #<seq>\", e.g. \"tp all_reduce #40\"");
  };
  if (group.empty() || op.empty() || seq.empty() || more) return bad("not three words");
  if (std::find(kGroups.begin(), kGroups.end(), group) == kGroups.end())
    return bad("unknown group kind \"" + group + "\" (world, tp, pp, dp, ep, etp, env, setup)");
  if (seq.size() < 2 || seq[0] != '#' || seq.find_first_not_of("0123456789", 1) != std::string::npos ||
      seq.size() > 12)
    return bad("the sequence number must be # and digits");
  s->group = group;
  s->op = op;
  s->seq = std::stoll(seq.substr(1));
  return Status::Ok();
}

const std::vector<UnbuiltKey>& unbuilt_keys() {
  static const std::vector<UnbuiltKey> keys = {};
  return keys;
}

Result<RunConfig> parse_run_config(const std::string& yaml_text, const std::string& source_name,
                                   const std::string& base_dir) {
  RunConfig cfg;
  cfg.source_text = yaml_text;
  cfg.source_name = source_name;
  cfg.base_dir = base_dir;
  cfg.config_stem = fs::path(source_name).stem().string();
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    Parser parser(&cfg);
    DZ_RETURN_IF_ERROR(parser.parse_root(root));
  } catch (const YAML::Exception& e) {
    std::string where = source_name;
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    return Status::InvalidArgument(where + ": " + (e.msg.empty() ? std::string(e.what()) : e.msg));
  }
  DZ_RETURN_IF_ERROR(validate(cfg));
  return cfg;
}

Result<RunConfig> load_run_config(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Status::InvalidArgument(path + ": is a folder, expected a run config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot read the run config (no such file or not readable)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::NotFound(path + ": cannot read the run config");
  fs::path dir = fs::absolute(fs::path(path), ec).parent_path();
  if (ec) dir = fs::path(path).parent_path();
  return parse_run_config(text.str(), path, dir.lexically_normal().string());
}

}  // namespace dayzero::config
