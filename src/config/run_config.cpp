// Run config YAML -> RunConfig: shapes, types, key names and enum spellings, with the line and
// column of each mistake. Value ranges and cross-key rules are validate()'s (validate.cpp).
// yaml-cpp exceptions are caught here (parse_run_config) and never leave src/config. The Parser
// is in run_config_internal.h; its diagnostics sections (dump, watchdog, checklist, debug) are in
// run_config_diag.cpp.
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "config/run_config.h"
#include "config/run_config_internal.h"
#include "topology/topology.h"

namespace dayzero::config {
namespace {

namespace fs = std::filesystem;

std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (base_dir.empty() || p.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

}  // namespace

namespace parse_internal {

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

Status Parser::parse_root(const YAML::Node& root) {
  if (!given(root)) return Status::InvalidArgument(cfg_->source_name + ": the run config is empty");
  DZ_RETURN_IF_ERROR(check_map(root, "", {"model", "backend", "comm", "parallel", "topology", "limits",
                                          "prompts", "generate", "dump", "watchdog", "runtime", "checklist",
                                          "serve", "debug", "preflight"}));
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
  if (given(root["preflight"])) DZ_RETURN_IF_ERROR(parse_preflight(root["preflight"]));
  if (given(root["runtime"])) DZ_RETURN_IF_ERROR(parse_runtime(root["runtime"]));
  if (given(root["checklist"])) DZ_RETURN_IF_ERROR(parse_checklist(root["checklist"]));
  if (given(root["serve"])) DZ_RETURN_IF_ERROR(parse_serve(root["serve"]));
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
  DZ_RETURN_IF_ERROR(check_map(n, path, {"id", "text", "tokens", "messages", "images", "expect", "reference"}));
  if (!given(n["id"])) return error(n, path + ".id", "missing required key (a unique name for the prompt)");
  DZ_RETURN_IF_ERROR(get_string(n["id"], path + ".id", &p->id));
  if (given(n["text"])) DZ_RETURN_IF_ERROR(get_string(n["text"], path + ".text", &p->text.emplace()));
  if (given(n["tokens"])) DZ_RETURN_IF_ERROR(get_token_ids(n["tokens"], path + ".tokens", &p->tokens.emplace()));
  if (given(n["messages"])) {
    // A chat as the service receives one: a list of {role, content, ...}, kept as JSON text for the
    // chat template (its scalars are strings, null stays null).
    const YAML::Node& m = n["messages"];
    const std::string mp = path + ".messages";
    if (!m.IsSequence() || m.size() == 0) return error(m, mp, "expected a non-empty list of {role, content} messages");
    std::function<nlohmann::ordered_json(const YAML::Node&)> to_json = [&](const YAML::Node& v) -> nlohmann::ordered_json {
      if (v.IsMap()) {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (const auto& kv : v) o[kv.first.Scalar()] = to_json(kv.second);
        return o;
      }
      if (v.IsSequence()) {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (const auto& e : v) a.push_back(to_json(e));
        return a;
      }
      if (v.IsNull()) return nullptr;
      return v.Scalar();
    };
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string ip = mp + "[" + std::to_string(i) + "]";
      note(m[i], ip);
      DZ_RETURN_IF_ERROR(check_map(m[i], ip, {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"}));
      if (!given(m[i]["role"]) || !m[i]["role"].IsScalar()) return error(m[i], ip + ".role", "expected a role (system, user, assistant, tool)");
      if (!m[i]["content"]) return error(m[i], ip + ".content", "missing required key (the message's text; null for a tool call)");
    }
    p->messages_json = to_json(m).dump();
  }
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

Status Parser::parse_runtime(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "runtime", {"threads", "staging_mib", "headroom_mib"}));
  DZ_RETURN_IF_ERROR(get_opt_int(n["staging_mib"], "runtime.staging_mib", &cfg_->runtime.staging_mib));
  DZ_RETURN_IF_ERROR(get_opt_int(n["headroom_mib"], "runtime.headroom_mib", &cfg_->runtime.headroom_mib));
  if (cfg_->runtime.headroom_mib && *cfg_->runtime.headroom_mib < 0)
    return error(n["headroom_mib"], "runtime.headroom_mib", "must be >= 0 MiB");
  return get_opt_int(n["threads"], "runtime.threads", &cfg_->runtime.threads);
}

}  // namespace parse_internal

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
    parse_internal::Parser parser(&cfg);
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
