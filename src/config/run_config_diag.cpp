// The run config's diagnostics sections (dump, watchdog, checklist, debug): apart so each file stays < 600 lines.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <string_view>

#include "config/run_config.h"
#include "config/run_config_internal.h"

namespace dayzero::config {
namespace parse_internal {
namespace {

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

}  // namespace

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

Status Parser::parse_preflight(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "preflight", {"outlier_fraction", "read_mib", "collective_mib"}));
  PreflightConfig& p = cfg_->preflight;
  if (given(n["outlier_fraction"])) {
    DZ_RETURN_IF_ERROR(get_double(n["outlier_fraction"], "preflight.outlier_fraction", &p.outlier_fraction));
    if (!(p.outlier_fraction > 0 && p.outlier_fraction <= 1))
      return error(n["outlier_fraction"], "preflight.outlier_fraction", "must be in (0, 1]");
  }
  if (given(n["read_mib"])) {
    DZ_RETURN_IF_ERROR(get_int64(n["read_mib"], "preflight.read_mib", &p.read_mib));
    if (p.read_mib < 1) return error(n["read_mib"], "preflight.read_mib", "must be >= 1");
  }
  if (given(n["collective_mib"])) {
    DZ_RETURN_IF_ERROR(get_int64(n["collective_mib"], "preflight.collective_mib", &p.collective_mib));
    if (p.collective_mib < 1) return error(n["collective_mib"], "preflight.collective_mib", "must be >= 1");
  }
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
  DZ_RETURN_IF_ERROR(check_map(n, "debug", {"perturb", "stall", "image_patterns", "reverse_combine"}));
  if (given(n["reverse_combine"]))
    DZ_RETURN_IF_ERROR(get_bool(n["reverse_combine"], "debug.reverse_combine", &cfg_->debug.reverse_combine));
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
  DZ_RETURN_IF_ERROR(check_map(st, "debug.stall", {"rank", "before", "seconds"}));
  if (!given(st["rank"])) return error(st, "debug.stall.rank", "missing required key (the world rank that stalls)");
  if (!given(st["before"]))
    return error(st, "debug.stall.before", "missing required key (e.g. \"tp all_reduce #40\")");
  StallConfig s;
  DZ_RETURN_IF_ERROR(get_int(st["rank"], "debug.stall.rank", &s.rank));
  DZ_RETURN_IF_ERROR(get_string(st["before"], "debug.stall.before", &s.before));
  if (s.rank < 0) return error(st["rank"], "debug.stall.rank", "must be >= 0, got " + std::to_string(s.rank));
  DZ_RETURN_IF_ERROR(get_opt_double(st["seconds"], "debug.stall.seconds", &s.seconds));
  if (s.seconds && !(*s.seconds > 0))
    return error(st["seconds"], "debug.stall.seconds", "must be > 0 (leave it out to stall for good)");
  const Status parsed = parse_stall_target(s.before, &s);
  if (!parsed.ok()) return error(st["before"], "debug.stall.before", parsed.message());
  cfg_->debug.stall = s;
  return Status::Ok();
}

}  // namespace parse_internal

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

}  // namespace dayzero::config
