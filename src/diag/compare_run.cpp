// Run-level comparison (compare_run.h): index the rank files, match keys, measure, blame.
#include "diag/compare_run.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <future>
#include <limits>
#include <regex>
#include <set>
#include <tuple>

#include "dump/schema.h"
#include "core/strings.h"

namespace fs = std::filesystem;

namespace dayzero::diag {
namespace {

// Sort key of a dump point name in forward order.
std::tuple<int, int64_t, int, std::string> forward_key(const std::string& name) {
  static const char* const kPoints[] = {"attn_norm", "index_topk_ids", "attn_out", "ffn_norm", "router_logits",
                                        "topk_ids",  "ffn_out",         "layer_out"};
  const auto layered = [&](int section, size_t prefix) -> std::tuple<int, int64_t, int, std::string> {
    const size_t dot = name.find('.', prefix);
    int64_t layer = 0;
    try {
      layer = std::stoll(name.substr(prefix, dot - prefix));
    } catch (...) {
      return {9, 0, 0, name};
    }
    const std::string point = dot == std::string::npos ? "" : name.substr(dot + 1);
    int p = 99;
    for (int i = 0; i < static_cast<int>(std::size(kPoints)); ++i)
      if (point == kPoints[i]) p = i;
    return {section, layer, p, point};
  };
  if (name.rfind("vision.layers.", 0) == 0) return layered(0, 14);
  if (name == "projector_out") return {1, 0, 0, ""};
  if (name == "merged_embed") return {2, 0, 0, ""};
  if (name == "embed") return {3, 0, 0, ""};
  if (name.rfind("layers.", 0) == 0) return layered(4, 7);
  if (name == "hc_head") return {5, 0, 0, ""};
  if (name == "final_norm") return {5, 1, 0, ""};
  if (name == "logits") return {6, 0, 0, ""};
  return {9, 0, 0, name};
}

// Whether "<prompt>/<phase>/<name>" is compared under a replay of layers [first, second): the
// prefill points of those layers only. Everything is, without a replay.
bool replay_scope(const std::optional<std::pair<int, int>>& layers, const std::string& key) {
  if (!layers) return true;
  const size_t s1 = key.find('/'), s2 = key.find('/', s1 + 1);
  if (s1 == std::string::npos || s2 == std::string::npos) return false;
  if (key.compare(s1 + 1, s2 - s1 - 1, dump::kPhasePrefill) != 0) return false;
  const std::string unit = unit_of(key.substr(s2 + 1));
  if (unit.rfind("layers.", 0) != 0) return false;
  int layer = -1;
  const auto [end, ec] = std::from_chars(unit.data() + 7, unit.data() + unit.size(), layer);
  return ec == std::errc() && end == unit.data() + unit.size() && layer >= layers->first && layer < layers->second;
}

int phase_order(const std::string& p) { return p == dump::kPhaseVision ? 0 : p == dump::kPhasePrefill ? 1 : p == dump::kPhaseDecode ? 2 : 3; }

// Stats rows of an activation: as stored when dumped in stats mode, else computed the way the
// writer does (one row for prefill, one per decode step).
Result<std::vector<double>> stats_rows(const dump::DumpReader& r, const std::string& prompt, const std::string& phase,
                                       const std::string& name) {
  const std::string path = dump::activation_path(prompt, phase, name);
  if (r.is_stats(prompt, phase, name)) {
    DZ_ASSIGN_OR_RETURN(dump::DoubleArray d, r.read_double(path));
    return std::move(d.data);
  }
  DZ_ASSIGN_OR_RETURN(dump::FloatArray f, r.read_float(path));
  const int64_t total = static_cast<int64_t>(f.data.size());
  const int64_t rows = phase == dump::kPhaseDecode && f.shape.size() == 2 ? f.shape[0] : 1;
  const int64_t width = rows ? total / rows : 0;
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i) {
    const auto s = dump::activation_stats(f.data.data() + i * width, width);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

// Both sides' values of one tensor, read and waiting to be measured; reused tensor after tensor.
struct TensorPair {
  dump::FloatArray a, b;
  int64_t row_limit = -1;
  double id_tolerance = 0;  // the tolerance of a topk_ids point whose shapes match
};

// Reads one tensor of both runs into pair (values) or measures it at once (stats and input
// errors, which are small). *measure is set when pair holds values for measure_values.
Result<TensorResult> load_tensor(const dump::DumpReader& ra, const dump::DumpReader& rb, const std::string& prompt,
                                 const std::string& phase, const std::string& name, int64_t row_limit,
                                 const PointTolerance& tol, TensorPair& pair, bool* measure) {
  *measure = false;
  TensorResult t;
  t.name = name;
  const std::string path = dump::activation_path(prompt, phase, name);
  const std::string ctx = "activation " + path + " (" + ra.path() + ", " + rb.path() + ")";
  t.stats = ra.is_stats(prompt, phase, name) || rb.is_stats(prompt, phase, name);
  t.tolerance = tol.rel_l2;
  if (t.stats) {
    t.measure = "stats";
    DZ_ASSIGN_OR_RETURN(std::vector<double> sa, stats_rows(ra, prompt, phase, name));
    DZ_ASSIGN_OR_RETURN(std::vector<double> sb, stats_rows(rb, prompt, phase, name));
    t.shape = {static_cast<int64_t>(sa.size() / dump::kStatsWidth), dump::kStatsWidth};
    int64_t rows = std::min(sa.size(), sb.size()) / dump::kStatsWidth;
    if (sa.size() != sb.size() && phase != dump::kPhaseDecode) rows = 0, t.error = kInf;
    if (row_limit >= 0) rows = std::min(rows, row_limit);
    t.rows_compared = rows;
    for (int64_t i = 0; i < rows; ++i)
      t.error = std::max(t.error, compare_stats(std::span(sa).subspan(i * 8, 8), std::span(sb).subspan(i * 8, 8)));
    t.broken = !(t.error <= t.tolerance);
    return t;
  }
  if (Status s = ra.read_float_into(path, pair.a); !s.ok()) return s.with_context(ctx);
  if (Status s = rb.read_float_into(path, pair.b); !s.ok()) return s.with_context(ctx);
  pair.row_limit = row_limit;
  pair.id_tolerance = tol.id_mismatch;
  *measure = true;
  return t;
}

// The metrics of a loaded pair (pure computation: runs on a worker thread).
void measure_values(const std::string& phase, const TensorPair& p, TensorResult& t) {
  const dump::FloatArray &fa = p.a, &fb = p.b;
  t.shape = fa.shape;
  const int64_t width = fa.shape.empty() ? 1 : fa.shape.back();
  bool same_shape = fa.shape == fb.shape;
  int64_t rows = width ? static_cast<int64_t>(fa.data.size()) / width : 0;
  // Decode rows past the first differing token saw other inputs; with fewer decode rows on
  // one side (it stopped earlier), the common rows are compared.
  if (!same_shape && phase == dump::kPhaseDecode && fa.shape.size() == 2 && fb.shape.size() == 2 &&
      fa.shape[1] == fb.shape[1]) {
    same_shape = true;
    rows = std::min(fa.shape[0], fb.shape[0]);
  }
  if (p.row_limit >= 0) rows = std::min(rows, p.row_limit);
  t.rows_compared = same_shape ? rows : 0;
  if (!same_shape) {
    t.error = kInf;
  } else {
    const auto sa = std::span<const float>(fa.data).first(rows * width);
    const auto sb = std::span<const float>(fb.data).first(rows * width);
    t.metrics = compare_tensors(sa, sb, std::max<int64_t>(width, 1));
    const bool ids = t.name.size() >= 8 && t.name.ends_with("topk_ids");
    if (ids) {
      t.measure = "id_mismatch";
      t.tolerance = p.id_tolerance;
      t.error = width ? id_set_mismatch(sa, sb, width) : 0;
    } else {
      t.error = t.metrics.rel_l2;
    }
  }
  t.broken = !(t.error <= t.tolerance);
}

}  // namespace

OutputResult compare_outputs(const dump::OutputRecord& a, const dump::OutputRecord& b, const OutputTolerance& tol) {
  OutputResult o;
  o.prompt = a.prompt_id;
  o.generated_a = a.generated_ids;
  o.generated_b = b.generated_ids;
  const size_t n = std::min(a.generated_ids.size(), b.generated_ids.size());
  for (size_t i = 0; i < n && o.first_diff < 0; ++i)
    if (a.generated_ids[i] != b.generated_ids[i]) o.first_diff = static_cast<int64_t>(i);
  if (o.first_diff < 0 && a.generated_ids.size() != b.generated_ids.size()) {
    o.first_diff = static_cast<int64_t>(n);
    o.pass = false;
    o.reasons.push_back("generated " + std::to_string(a.generated_ids.size()) + " vs " +
                        std::to_string(b.generated_ids.size()) + " tokens with an equal prefix");
  } else if (o.first_diff >= 0) {
    const int64_t s = o.first_diff;
    const auto gap = [&](const dump::OutputRecord& r, double* out) {
      if (r.topk < 2 || static_cast<int64_t>(r.step_topk_logits.size()) < (s + 1) * r.topk) return false;
      const double top1 = r.step_topk_logits[s * r.topk], top2 = r.step_topk_logits[s * r.topk + 1];
      *out = top1 - top2;
      return *out <= tol.near_tie * std::max(1.0, std::fabs(top1));
    };
    double gb = 0;
    const bool tie_a = gap(a, &o.tie_gap), tie_b = gap(b, &gb);
    o.near_tie = tie_a || tie_b;
    char buf[160];
    std::snprintf(buf, sizeof buf, "generated tokens differ from position %lld (%d vs %d), top-1/top-2 gap %.3g",
                  static_cast<long long>(s), a.generated_ids[s < static_cast<int64_t>(a.generated_ids.size()) ? s : 0],
                  b.generated_ids[s < static_cast<int64_t>(b.generated_ids.size()) ? s : 0], o.tie_gap);
    o.reasons.push_back(std::string(buf) + (o.near_tie ? ": a near-tie" : ": not a near-tie"));
    if (!o.near_tie) o.pass = false;
  }
  if (a.logits_last.size() != b.logits_last.size() || a.logits_last.empty()) {
    o.pass = false;
    o.reasons.push_back("logits_last has " + std::to_string(a.logits_last.size()) + " vs " +
                        std::to_string(b.logits_last.size()) + " values");
  } else {
    o.logits = compare_logits(a.logits_last, b.logits_last);
    char buf[160];
    if (!(o.logits.nmse <= tol.logits_nmse)) {
      std::snprintf(buf, sizeof buf, "logits_last NMSE %.3g above %.3g", o.logits.nmse, tol.logits_nmse);
      o.pass = false, o.reasons.push_back(buf);
    }
    if (!(o.logits.kl <= tol.logits_kl)) {
      std::snprintf(buf, sizeof buf, "logits_last KL %.3g above %.3g", o.logits.kl, tol.logits_kl);
      o.pass = false, o.reasons.push_back(buf);
    }
    if (!o.logits.top1_agree && !(o.first_diff == 0 && o.near_tie)) {
      o.pass = false;
      o.reasons.push_back("logits_last top-1 differs: " + std::to_string(o.logits.top1_a) + " vs " +
                          std::to_string(o.logits.top1_b));
    }
  }
  o.nll_a = a.reference_nll;
  o.nll_b = b.reference_nll;
  if (o.nll_a && o.nll_b && !(std::fabs(*o.nll_a - *o.nll_b) <= tol.nll)) {
    char buf[120];
    std::snprintf(buf, sizeof buf, "reference NLL %.6g vs %.6g", *o.nll_a, *o.nll_b);
    o.pass = false, o.reasons.push_back(buf);
  }
  return o;
}

namespace {

// Marks blame: walking units in forward order, the first unit with a broken tensor whose input
// (everything before it) agreed is blamed; broken tensors after it are inherited.
void assign_blame(GroupResult& g) {
  bool upstream_broken = false;
  size_t i = 0;
  while (i < g.tensors.size()) {
    const std::string unit = unit_of(g.tensors[i].name);
    size_t j = i;
    while (j < g.tensors.size() && unit_of(g.tensors[j].name) == unit) ++j;
    bool any = false;
    for (size_t k = i; k < j; ++k) {
      TensorResult& t = g.tensors[k];
      if (!t.broken) continue;
      if (!g.first_break) g.first_break = k;
      if (upstream_broken) {
        t.verdict = Verdict::kInherited;
      } else if (!any) {
        t.verdict = Verdict::kBlamed;
        g.blamed_unit = unit;
        g.blamed_point = t.name;
      } else {
        t.verdict = Verdict::kBroken;
      }
      any = true;
    }
    if (any && upstream_broken && (g.inherited_units.empty() || g.inherited_units.back() != unit))
      g.inherited_units.push_back(unit);
    upstream_broken = upstream_broken || any;
    i = j;
  }
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kBlamed: return "BLAMED";
    case Verdict::kBroken: return "broken";
    case Verdict::kInherited: return "inherited";
  }
  return "?";
}

bool forward_before(const std::string& x, const std::string& y) { return forward_key(x) < forward_key(y); }

std::string unit_of(const std::string& name) {
  for (const std::string prefix : {"vision.layers.", "layers."}) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    return name.substr(0, dot);
  }
  return name;
}

Result<RunIndex> open_run(const std::string& dir, bool allow_incomplete) {
  RunIndex run;
  run.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a run folder");
  std::vector<std::string> paths;
  static const std::regex kRankFile(R"(rank-\d{5}\.h5)");
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (std::regex_match(e.path().filename().string(), kRankFile)) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) return Status::NotFound(dir + ": no rank-NNNNN.h5 files");
  for (const std::string& p : paths) {
    DZ_ASSIGN_OR_RETURN(dump::DumpReader r, dump::DumpReader::open(p));
    DZ_ASSIGN_OR_RETURN(bool complete, r.complete());
    if (!complete) {
      if (!allow_incomplete)
        return Status::InvalidArgument(p + ": the run did not finish (complete = 0); pass --allow-incomplete to compare what it wrote");
      run.incomplete.push_back(p);
    }
    auto attrs = r.root_attributes();
    if (!attrs.ok()) return Status(attrs.status()).with_context(p);
    std::optional<std::pair<int, int>> replay;
    if (r.has_attr(dump::kAttrReplayLayerBegin)) {
      DZ_ASSIGN_OR_RETURN(int64_t begin, r.attr_int(dump::kAttrReplayLayerBegin));
      DZ_ASSIGN_OR_RETURN(int64_t end, r.attr_int(dump::kAttrReplayLayerEnd));
      replay = std::pair<int, int>{static_cast<int>(begin), static_cast<int>(end)};
    }
    if (!run.files.empty() && replay != run.replay_layers)
      return Status::InvalidArgument(p + ": its replay attributes differ from those of " + run.files.front().path());
    run.replay_layers = replay;
    run.world_size = std::max(run.world_size, attrs->world_size);
    if (run.compute_dtype.empty()) {
      std::string dtype;
      try {
        const YAML::Node cfg = YAML::Load(attrs->run_config);
        if (cfg.IsMap() && cfg["model"] && cfg["model"].IsMap() && cfg["model"]["dtype"])
          dtype = cfg["model"]["dtype"].Scalar();
      } catch (const YAML::Exception&) {
      }
      run.compute_dtype = !dtype.empty() ? dtype : attrs->backend == "cuda" ? "bfloat16" : "float32";
    }
    const int index = static_cast<int>(run.files.size());
    DZ_ASSIGN_OR_RETURN(std::vector<std::string> prompts, r.list_prompts());
    for (const std::string& prompt : prompts) {
      if (r.exists("/outputs/" + prompt)) {
        auto [it, fresh] = run.outputs.emplace(prompt, index);
        if (!fresh)
          return Status::InvalidArgument(p + ": /outputs/" + prompt + " is also written by " + run.files[it->second].path());
      }
      if (!r.exists("/activations/" + prompt)) continue;
      DZ_ASSIGN_OR_RETURN(std::vector<std::string> phases, r.list("/activations/" + prompt));
      for (const std::string& phase : phases) {
        DZ_ASSIGN_OR_RETURN(std::vector<std::string> names, r.list_activations(prompt, phase));
        for (const std::string& name : names) {
          auto [it, fresh] = run.activations.emplace(prompt + "/" + phase + "/" + name, index);
          if (!fresh)
            return Status::InvalidArgument(p + ": activation " + it->first + " is also written by " +
                                           run.files[it->second].path());
        }
      }
    }
    run.files.push_back(std::move(r));
  }
  if (static_cast<int64_t>(paths.size()) != run.world_size && !allow_incomplete)
    return Status::InvalidArgument(dir + ": " + std::to_string(paths.size()) + " rank files for a world of " +
                                   std::to_string(run.world_size) + "; pass --allow-incomplete to compare what is there");
  return run;
}

Result<CompareResult> compare_runs(const RunIndex& a, const RunIndex& b, const TolerancePolicy& tol,
                                   bool allow_incomplete) {
  CompareResult res;
  res.run_a = a.dir;
  res.run_b = b.dir;
  res.tolerance = tol;
  if (a.replay_layers && b.replay_layers && *a.replay_layers != *b.replay_layers)
    return Status::InvalidArgument(a.dir + " and " + b.dir + " are replays of different layers");
  res.replay_layers = a.replay_layers ? a.replay_layers : b.replay_layers;
  const auto in_scope = [&](const std::string& key) { return replay_scope(res.replay_layers, key); };
  std::set<std::string> keys_a, keys_b;
  for (const auto& [k, _] : a.activations)
    if (in_scope(k)) keys_a.insert("activations/" + k);
  for (const auto& [k, _] : b.activations)
    if (in_scope(k)) keys_b.insert("activations/" + k);
  if (!res.replay_layers) {  // a replay has no outputs
    for (const auto& [k, _] : a.outputs) keys_a.insert("outputs/" + k);
    for (const auto& [k, _] : b.outputs) keys_b.insert("outputs/" + k);
  }
  std::set_difference(keys_a.begin(), keys_a.end(), keys_b.begin(), keys_b.end(), std::back_inserter(res.only_in_a));
  std::set_difference(keys_b.begin(), keys_b.end(), keys_a.begin(), keys_a.end(), std::back_inserter(res.only_in_b));
  if (!allow_incomplete && (!res.only_in_a.empty() || !res.only_in_b.empty())) {
    std::string m = "the runs hold different keys";
    if (!res.only_in_a.empty()) m += "; only in " + a.dir + ": " + join_list(res.only_in_a, 20);
    if (!res.only_in_b.empty()) m += "; only in " + b.dir + ": " + join_list(res.only_in_b, 20);
    return Status::InvalidArgument(m);
  }
  if (keys_a.size() == res.only_in_a.size())
    return Status::InvalidArgument("nothing matched between " + a.dir + " and " + b.dir);

  // Outputs first: the first differing generated token bounds the decode rows worth comparing.
  std::map<std::string, int64_t> decode_rows;
  for (const auto& [prompt, fa] : a.outputs) {
    const auto fb = b.outputs.find(prompt);
    if (fb == b.outputs.end() || res.replay_layers) continue;
    DZ_ASSIGN_OR_RETURN(dump::OutputRecord oa, a.files[fa].read_output(prompt));
    DZ_ASSIGN_OR_RETURN(dump::OutputRecord ob, b.files[fb->second].read_output(prompt));
    OutputResult o = compare_outputs(oa, ob, tol.outputs);
    if (o.first_diff >= 0) decode_rows[prompt] = o.first_diff;
    res.pass = res.pass && o.pass;
    res.outputs.push_back(std::move(o));
  }

  std::map<std::tuple<std::string, int, std::string>, std::vector<std::string>> groups;
  for (const auto& [key, _] : a.activations) {
    if (!b.activations.count(key) || !in_scope(key)) continue;
    const size_t s1 = key.find('/'), s2 = key.find('/', s1 + 1);
    const std::string prompt = key.substr(0, s1), phase = key.substr(s1 + 1, s2 - s1 - 1);
    groups[{prompt, phase_order(phase), phase}].push_back(key.substr(s2 + 1));
  }
  // Tensors are read on this thread (HDF5 calls stay on one thread) into one of two pairs of
  // buffers while a worker measures the previous tensor in the other: reading and measuring
  // overlap, and the buffers are reused.
  std::vector<int64_t> row_limits;  // per group: decode rows to compare, -1 for all
  for (auto& [gk, names] : groups) {
    GroupResult g;
    g.prompt = std::get<0>(gk);
    g.phase = std::get<2>(gk);
    std::sort(names.begin(), names.end(), forward_before);
    int64_t limit = -1;
    if (g.phase == dump::kPhaseDecode && decode_rows.count(g.prompt)) {
      limit = decode_rows[g.prompt];
      g.note = "decode rows from step " + std::to_string(limit) + " on are not compared: the generated tokens differ there";
    }
    g.tensors.resize(names.size());
    res.groups.push_back(std::move(g));
    row_limits.push_back(limit);
  }
  {
    TensorPair pairs[2];
    std::future<void> pending;  // the worker's measure of the previous tensor
    size_t n_job = 0, gi = 0;
    for (const auto& [gk, names] : groups) {
      GroupResult& g = res.groups[gi];
      for (size_t k = 0; k < names.size(); ++k, ++n_job) {
        const std::string key = g.prompt + "/" + g.phase + "/" + names[k];
        TensorPair& pair = pairs[n_job % 2];
        bool measure = false;
        auto t = load_tensor(a.files[a.activations.at(key)], b.files[b.activations.at(key)], g.prompt, g.phase,
                             names[k], row_limits[gi], tol.for_name(names[k]), pair, &measure);
        if (pending.valid()) pending.get();
        if (!t.ok()) return t.status();
        TensorResult& slot = g.tensors[k];
        slot = std::move(*t);
        if (measure)
          pending = std::async(std::launch::async, [&phase = g.phase, &pair, &slot] { measure_values(phase, pair, slot); });
      }
      ++gi;
    }
    if (pending.valid()) pending.get();
  }
  for (GroupResult& g : res.groups) {
    assign_blame(g);
    if (g.first_break) res.pass = false;
  }
  return res;
}

}  // namespace dayzero::diag
