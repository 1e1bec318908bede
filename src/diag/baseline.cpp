// The baseline library (baseline.h): identity of a run folder, the item-by-item check, saving
// a passing run as LIBRARY/NAME (one merged rank file, its capture settings, baseline.json),
// listing and reading.
#include "diag/baseline.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "checkpoint/xxhash.h"
#include "core/clock.h"
#include "core/json.h"
#include "diag/checklist.h"
#include "dump/dump_writer.h"
#include "dump/run_folder.h"
#include "dump/schema.h"
#include "core/strings.h"

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace dayzero::diag {
namespace {

constexpr const char* kIdentityFileName = "identity.json";

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string shown(const ordered_json& j) { return j.is_null() ? "(none)" : j.dump(); }

// Objects keyed by a field ("name" of shard files, "id" of prompts).
std::map<std::string, ordered_json> by_key(const ordered_json& list, const char* key) {
  std::map<std::string, ordered_json> m;
  if (list.is_array())
    for (const auto& e : list)
      if (e.is_object() && e.contains(key) && e[key].is_string()) m[e[key].get<std::string>()] = e;
  return m;
}

const ordered_json& field(const ordered_json& j, const char* key) {
  static const ordered_json null;
  return j.is_object() && j.contains(key) ? j[key] : null;
}

// "key: A in a, B in b" for every key of two flat objects whose values differ.
void flat_mismatches(const std::string& prefix, const ordered_json& x, const ordered_json& y, const std::string& a,
                     const std::string& b, std::vector<std::string>& out) {
  std::set<std::string> keys;
  for (const auto* j : {&x, &y})
    if (j->is_object())
      for (auto it = j->begin(); it != j->end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys)
    if (field(x, k.c_str()) != field(y, k.c_str()))
      out.push_back(prefix + k + ": " + shown(field(x, k.c_str())) + " in " + a + ", " + shown(field(y, k.c_str())) +
                    " in " + b);
}

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  return f ? Status::Ok() : Status::IoError("cannot write " + p.string());
}

// The merged rank file: every output and activation of the run, activations as `mode`.
Status write_merged(const RunIndex& run, const std::string& path, const std::string& mode, const std::string& name,
                    const std::string& source) {
  DZ_ASSIGN_OR_RETURN(dump::RootAttributes a, run.files.front().root_attributes());
  a.rank = 0;
  a.world_size = 1;
  a.dp = a.pp = a.tp = a.ep = a.etp = 1;
  a.clock_offset_ns = 0;
  DZ_ASSIGN_OR_RETURN(std::unique_ptr<dump::DumpWriter> w, dump::DumpWriter::create(path, a));
  DZ_RETURN_IF_ERROR(w->set_attribute("baseline_name", name));
  DZ_RETURN_IF_ERROR(w->set_attribute("baseline_source", source));
  DZ_RETURN_IF_ERROR(w->set_attribute("baseline_source_world_size", run.world_size));
  for (const auto& [prompt, index] : run.outputs) {
    DZ_ASSIGN_OR_RETURN(dump::OutputRecord out, run.files[index].read_output(prompt));
    DZ_RETURN_IF_ERROR(w->write_output(out));
  }
  for (const auto& [key, index] : run.activations) {
    const size_t s1 = key.find('/'), s2 = key.find('/', s1 + 1);
    const std::string prompt = key.substr(0, s1), phase = key.substr(s1 + 1, s2 - s1 - 1), point = key.substr(s2 + 1);
    const dump::DumpReader& r = run.files[index];
    const std::string dataset = dump::activation_path(prompt, phase, point);
    if (r.is_stats(prompt, phase, point)) {
      if (mode == "full")
        return Status::InvalidArgument(r.path() + ": " + dataset +
                                       " holds statistics only (dump.activations.mode: stats); save it with "
                                       "--activations stats");
      DZ_ASSIGN_OR_RETURN(dump::DoubleArray d, r.read_double(dataset));
      DZ_RETURN_IF_ERROR(w->write_activation_stats_rows(prompt, phase, point, d.data.data(),
                                                        static_cast<int64_t>(d.data.size()) / dump::kStatsWidth));
      continue;
    }
    DZ_ASSIGN_OR_RETURN(dump::FloatArray f, r.read_float(dataset));
    const int64_t total = static_cast<int64_t>(f.data.size());
    const int64_t rows = f.shape.size() >= 2 ? f.shape[0] : 1;
    const int64_t width = rows ? total / rows : 0;
    if (mode == "full") {
      DZ_RETURN_IF_ERROR(w->write_activation(prompt, phase, point, f.data.data(), rows, width));
    } else if (phase == dump::kPhaseDecode) {  // one stats row per decode step, as the writer does
      for (int64_t i = 0; i < rows; ++i)
        DZ_RETURN_IF_ERROR(w->write_activation_stats(prompt, phase, point, f.data.data() + i * width, width));
    } else {
      DZ_RETURN_IF_ERROR(w->write_activation_stats(prompt, phase, point, f.data.data(), total));
    }
  }
  DZ_RETURN_IF_ERROR(w->mark_complete());
  return w->close();
}

// Why a run folder cannot be a baseline, as one sentence; empty when it passed.
Result<std::string> refusal(const std::string& run_dir) {
  auto c = read_checklist(run_dir);
  const std::string tail = "; only a run that passed can be saved as a baseline";
  if (!c.ok() && c.status().code() == StatusCode::kNotFound)
    return run_dir + ": no " + kChecklistFileName +
           ": the run did not reach its end (killed, hung, or stopped before its run folder was made)" + tail;
  if (!c.ok()) return c.status();
  const nlohmann::json& j = *c;
  const int code = j["exit_code"].get<int>();
  if (!j["complete"].get<bool>())
    return run_dir + ": the run stopped in phase '" + j.value("failed_phase", std::string("?")) + "' with exit code " +
           std::to_string(code) + " (" + j.value("error", std::string("")) + ")" + tail;
  if (code != 0) {
    std::vector<std::string> failed;
    if (j.contains("lines") && j["lines"].is_array())
      for (const auto& l : j["lines"])
        if (l.is_object() && l.value("status", std::string()) == "fail") failed.push_back(l.value("title", std::string("?")));
    return run_dir + ": the run ended with exit code " + std::to_string(code) +
           (failed.empty() ? "" : " (checklist failed: " + join_list(failed) + ")") + tail;
  }
  return std::string();
}

std::vector<std::string> changes_from(const ordered_json& old_rec, const ordered_json& rec) {
  std::vector<std::string> out =
      identity_mismatches(field(old_rec, "identity"), field(rec, "identity"), "the old baseline", "the new run");
  const ordered_json &ro = field(old_rec, "recorded"), &rn = field(rec, "recorded");
  std::set<std::string> keys;
  for (const auto* j : {&ro, &rn})
    if (j->is_object())
      for (auto it = j->begin(); it != j->end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys)
    if (field(ro, k.c_str()) != field(rn, k.c_str()))
      out.push_back(k + ": " + shown(field(ro, k.c_str())) + " -> " + shown(field(rn, k.c_str())));
  for (const char* k : {"activations", "source_run"})
    if (field(old_rec, k) != field(rec, k))
      out.push_back(std::string(k) + ": " + shown(field(old_rec, k)) + " -> " + shown(field(rec, k)));
  const ordered_json &oo = field(old_rec, "outputs"), &on = field(rec, "outputs");
  if (on.is_object())
    for (auto it = on.begin(); it != on.end(); ++it) {
      const ordered_json& before = field(oo, it.key().c_str());
      if (before.is_null()) continue;  // a new prompt is an identity line already
      const auto a = before.get<std::vector<int32_t>>(), b = it.value().get<std::vector<int32_t>>();
      if (a == b) continue;
      size_t k = 0;
      while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
      out.push_back("prompt '" + it.key() + "': generated tokens changed from position " + std::to_string(k));
    }
  return out;
}

}  // namespace

std::string baseline_library(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* e = std::getenv(kBaselineLibraryEnv); e && *e) return e;
  return kDefaultBaselineLibrary;
}

Result<std::string> baseline_dir(const std::string& library, const std::string& name) {
  static const std::regex kName(R"([A-Za-z0-9][A-Za-z0-9._-]*)");
  if (name.size() > 100 || !std::regex_match(name, kName))
    return Status::InvalidArgument("baseline name \"" + name +
                                   "\": use letters, digits, '.', '_' and '-', starting with a letter or digit");
  return (fs::path(library) / name).string();
}

Result<ordered_json> run_identity(const RunIndex& run) {
  const std::string path = (fs::path(run.dir) / kIdentityFileName).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::InvalidArgument(path + ": no such file: the run folder has no identity record (made by an older dayzero?)");
  DZ_ASSIGN_OR_RETURN(nlohmann::json raw, read_json_file(path));
  const ordered_json id = ordered_json::parse(raw.dump());
  for (const char* k : {"model", "dtype", "dump", "generate", "prompts", "recorded"})
    if (!id.is_object() || !id.contains(k))
      return Status::InvalidArgument(path + ": not an identity record (no \"" + k + "\")");
  ordered_json dump = id["dump"];
  if (dump.is_object()) dump.erase("mode");  // stats and full dumps compare with each other
  ordered_json prompts = ordered_json::array();
  for (const auto& p : id["prompts"]) {
    if (!p.is_object() || !p.contains("id") || !p["id"].is_string())
      return Status::InvalidArgument(path + ": prompts: an entry without an id");
    ordered_json e = {{"id", p["id"]}, {"images", field(p, "images")}, {"tokens", nullptr}, {"tokens_xxh64", nullptr}};
    const auto out = run.outputs.find(p["id"].get<std::string>());
    if (out != run.outputs.end()) {
      DZ_ASSIGN_OR_RETURN(dump::OutputRecord rec, run.files[out->second].read_output(out->first));
      e["tokens"] = rec.prompt_ids.size();
      e["tokens_xxh64"] = hex64(checkpoint::xxh64(rec.prompt_ids.data(), rec.prompt_ids.size() * sizeof(int32_t)));
    }
    prompts.push_back(std::move(e));
  }
  ordered_json recorded = id["recorded"];
  std::vector<std::string> hosts;
  for (const dump::DumpReader& r : run.files) {
    DZ_ASSIGN_OR_RETURN(dump::RootAttributes a, r.root_attributes());
    if (std::find(hosts.begin(), hosts.end(), a.hostname) == hosts.end()) hosts.push_back(a.hostname);
    if (&r == &run.files.front()) {
      recorded["backend"] = a.backend;
      recorded["started_at"] = a.started_at;
    }
  }
  recorded["hosts"] = hosts;
  recorded["dump_mode"] = field(id["dump"], "mode");
  return ordered_json{
      {"match",
       {{"model", id["model"]}, {"dtype", id["dtype"]}, {"dump", dump}, {"generate", id["generate"]}, {"prompts", prompts}}},
      {"recorded", recorded}};
}

std::vector<std::string> identity_mismatches(const ordered_json& x, const ordered_json& y, const std::string& a,
                                             const std::string& b) {
  std::vector<std::string> out;
  // The model: config.json, the tensor count, then shard by shard.
  const ordered_json &mx = field(x, "model"), &my = field(y, "model");
  if (field(mx, "config_xxh64") != field(my, "config_xxh64"))
    out.push_back("model: config.json differs (xxh64 " + shown(field(mx, "config_xxh64")) + " in " + a + ", " +
                  shown(field(my, "config_xxh64")) + " in " + b + ")");
  if (field(mx, "tensors") != field(my, "tensors"))
    out.push_back("model: " + shown(field(mx, "tensors")) + " tensors in " + a + ", " + shown(field(my, "tensors")) +
                  " in " + b);
  const auto fx = by_key(field(mx, "files"), "name"), fy = by_key(field(my, "files"), "name");
  for (const auto& [name, f] : fx) {
    const auto it = fy.find(name);
    if (it == fy.end()) {
      out.push_back("model: shard " + name + " is in " + a + " only");
      continue;
    }
    const ordered_json& g = it->second;
    if (field(f, "bytes") != field(g, "bytes"))
      out.push_back("model: shard " + name + " is " + shown(field(f, "bytes")) + " bytes in " + a + ", " +
                    shown(field(g, "bytes")) + " in " + b);
    else if (field(f, "header_xxh64") != field(g, "header_xxh64"))
      out.push_back("model: shard " + name + ": its safetensors header (tensor names, dtypes, shapes, offsets) differs between " +
                    a + " and " + b);
    if (f.contains("sha256") && g.contains("sha256") && f["sha256"] != g["sha256"])
      out.push_back("model: shard " + name + ": SHA-256 " + shown(f["sha256"]) + " in " + a + ", " + shown(g["sha256"]) +
                    " in " + b);
  }
  for (const auto& [name, f] : fy)
    if (!fx.count(name)) out.push_back("model: shard " + name + " is in " + b + " only");
  if (field(x, "dtype") != field(y, "dtype"))
    out.push_back("dtype: " + shown(field(x, "dtype")) + " in " + a + ", " + shown(field(y, "dtype")) + " in " + b);
  flat_mismatches("dump.activations.", field(x, "dump"), field(y, "dump"), a, b, out);
  flat_mismatches("generate.", field(x, "generate"), field(y, "generate"), a, b, out);
  // Prompts by id: the sets, then each common prompt's token ids and images.
  const auto px = by_key(field(x, "prompts"), "id"), py = by_key(field(y, "prompts"), "id");
  std::vector<std::string> only_x, only_y;
  for (const auto& [id, _] : px)
    if (!py.count(id)) only_x.push_back("'" + id + "'");
  for (const auto& [id, _] : py)
    if (!px.count(id)) only_y.push_back("'" + id + "'");
  if (!only_x.empty()) out.push_back("prompts: only in " + a + ": " + join_list(only_x));
  if (!only_y.empty()) out.push_back("prompts: only in " + b + ": " + join_list(only_y));
  for (const auto& [id, p] : px) {
    const auto it = py.find(id);
    if (it == py.end()) continue;
    const ordered_json& q = it->second;
    if (field(p, "tokens_xxh64") != field(q, "tokens_xxh64"))
      out.push_back("prompt '" + id + "': its token ids differ (" + shown(field(p, "tokens")) + " tokens in " + a + ", " +
                    shown(field(q, "tokens")) + " in " + b + ")");
    if (field(p, "images") != field(q, "images"))
      out.push_back("prompt '" + id + "': its images differ (" + shown(field(p, "images")) + " in " + a + ", " +
                    shown(field(q, "images")) + " in " + b + ")");
  }
  return out;
}

Result<SaveResult> save_baseline(const SaveOptions& o) {
  DZ_ASSIGN_OR_RETURN(std::string dir, baseline_dir(o.library, o.name));
  if (o.activations != "" && o.activations != "stats" && o.activations != "full")
    return Status::InvalidArgument("--activations: \"" + o.activations + "\": expected stats or full");
  std::error_code ec;
  if (!fs::is_directory(o.run_dir, ec)) return Status::InvalidArgument(o.run_dir + ": not a run folder");
  DZ_ASSIGN_OR_RETURN(std::string why, refusal(o.run_dir));
  if (!why.empty()) return Status::InvalidArgument(why);
  auto run = open_run(o.run_dir, false);
  if (!run.ok()) return Status(run.status()).with_context("cannot save a baseline from " + o.run_dir);
  if (run->replay_layers)
    return Status::InvalidArgument(o.run_dir + ": a replay (layers " + std::to_string(run->replay_layers->first) + ".." +
                                   std::to_string(run->replay_layers->second - 1) +
                                   ") cannot be a baseline; save the full run");
  DZ_ASSIGN_OR_RETURN(ordered_json id, run_identity(*run));
  const std::string mode =
      !o.activations.empty() ? o.activations : field(id["recorded"], "dump_mode").is_string()
                                                   ? id["recorded"]["dump_mode"].get<std::string>()
                                                   : std::string("full");
  const std::string source = fs::absolute(o.run_dir, ec).lexically_normal().string();

  ordered_json rec = {{"schema_version", 1},
                      {"name", o.name},
                      {"saved_at", utc_iso8601(realtime_ns())},
                      {"source_run", source},
                      {"activations", mode},
                      {"identity", id["match"]},
                      {"recorded", id["recorded"]},
                      {"outputs", ordered_json::object()}};
  for (const auto& [prompt, index] : run->outputs) {
    DZ_ASSIGN_OR_RETURN(dump::OutputRecord out, run->files[index].read_output(prompt));
    rec["outputs"][prompt] = out.generated_ids;
  }

  fs::create_directories(o.library, ec);
  if (ec) return Status::IoError(o.library + ": cannot create the baseline library: " + ec.message());
  const std::string pid = std::to_string(::getpid());
  const fs::path fresh = fs::path(o.library) / ("." + o.name + ".new-" + pid);
  const fs::path old = fs::path(o.library) / ("." + o.name + ".old-" + pid);
  fs::remove_all(fresh, ec);
  fs::create_directories(fresh, ec);
  if (ec) return Status::IoError(fresh.string() + ": " + ec.message());
  const auto built = [&]() -> Status {
    DZ_RETURN_IF_ERROR(write_merged(*run, (fresh / "rank-00000.h5").string(), mode, o.name, source));
    for (const char* f : {dump::kConfigFileName, dump::kPlanFileName, kIdentityFileName, kChecklistFileName}) {
      std::error_code cec;
      if (fs::exists(fs::path(o.run_dir) / f, cec)) fs::copy_file(fs::path(o.run_dir) / f, fresh / f, cec);
      if (cec) return Status::IoError(fresh.string() + ": cannot copy " + f + ": " + cec.message());
    }
    return write_text(fresh / kBaselineFileName, rec.dump(2) + "\n");
  }();
  if (!built.ok()) {
    fs::remove_all(fresh, ec);
    return built;
  }
  SaveResult res;
  res.dir = dir;
  res.record = rec;
  if (fs::exists(dir, ec)) {
    res.replaced = true;
    auto before = read_baseline(o.library, o.name);
    res.changes = before.ok() ? changes_from(*before, rec)
                              : std::vector<std::string>{"the old baseline.json was unreadable: " + before.status().message()};
    fs::rename(dir, old, ec);
    if (ec) {
      fs::remove_all(fresh, ec);
      return Status::IoError(dir + ": cannot move the old baseline aside: " + ec.message());
    }
  }
  fs::rename(fresh, dir, ec);
  if (ec) return Status::IoError(dir + ": cannot move the new baseline into place: " + ec.message());
  fs::remove_all(old, ec);
  return res;
}

Result<ordered_json> read_baseline(const std::string& library, const std::string& name) {
  DZ_ASSIGN_OR_RETURN(std::string dir, baseline_dir(library, name));
  const fs::path path = fs::path(dir) / kBaselineFileName;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Status::NotFound("no baseline '" + name + "' in " + library + " (dayzero baseline list --library " + library +
                            ")");
  DZ_ASSIGN_OR_RETURN(nlohmann::json raw, read_json_file(path.string()));
  ordered_json j = ordered_json::parse(raw.dump());
  for (const char* k : {"name", "identity", "recorded", "activations"})
    if (!j.is_object() || !j.contains(k))
      return Status::InvalidArgument(path.string() + ": not a baseline record (no \"" + k + "\")");
  return j;
}

Result<std::vector<ordered_json>> list_baselines(const std::string& library) {
  std::error_code ec;
  if (!fs::is_directory(library, ec))
    return Status::NotFound(library + ": no such baseline library (save one with dayzero baseline save)");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(library, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && !n.empty() && n[0] != '.') names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::vector<ordered_json> out;
  for (const std::string& n : names) {
    auto b = read_baseline(library, n);
    out.push_back(b.ok() ? *b : ordered_json{{"name", n}, {"error", b.status().message()}});
  }
  return out;
}

Status check_against_baseline(const ordered_json& baseline, const RunIndex& run) {
  DZ_ASSIGN_OR_RETURN(ordered_json id, run_identity(run));
  const std::vector<std::string> lines = identity_mismatches(baseline["identity"], id["match"], "the baseline", "the run");
  if (lines.empty()) return Status::Ok();
  std::string m = run.dir + " does not match baseline '" + baseline["name"].get<std::string>() + "' in " +
                  std::to_string(lines.size()) + " item(s):";
  for (const std::string& l : lines) m += "\n  " + l;
  return Status::InvalidArgument(m);
}

}  // namespace dayzero::diag
