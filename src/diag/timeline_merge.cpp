// Event logs and heartbeats of a run folder, paired and aligned to rank 0's clock.
#include "diag/timeline_merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>
#include <tuple>

#include "core/json.h"
#include "dump/heartbeat.h"
#include "dump/run_folder.h"

namespace dayzero::diag {
namespace fs = std::filesystem;
namespace {

// Largest event log read (a 1 M-line log of a long run is ~150 MiB).
constexpr uint64_t kMaxEventLogBytes = 1ull << 30;

int world_size_of(const std::string& run_dir) {
  auto plan = read_json_file((fs::path(run_dir) / dump::kPlanFileName).string(), {.max_depth = 16});
  if (plan.ok() && plan->is_object()) {
    for (const char* k : {"world_size", "world"})
      if (plan->contains(k) && (*plan)[k].is_number_integer()) return (*plan)[k].get<int>();
    if (plan->contains("ranks") && (*plan)["ranks"].is_array()) return static_cast<int>((*plan)["ranks"].size());
  }
  int highest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / dump::kEventsDirName, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("rank-", 0) == 0 && n.size() > 11 && n.substr(n.size() - 6) == ".jsonl") {
      const std::string digits = n.substr(5, n.size() - 11);
      if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 9)
        highest = std::max(highest, std::stoi(digits));
    }
  }
  return highest + 1;
}

std::string str_of(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
}
int64_t int_of(const nlohmann::json& j, const char* k, int64_t dflt) {
  return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : dflt;
}

void read_log(const std::string& path, RankTrail& r) {
  auto text = read_regular_file(path, kMaxEventLogBytes);
  if (!text.ok()) return;
  r.has_log = true;
  using Key = std::tuple<std::string, std::string, std::string, int64_t>;
  std::map<Key, std::vector<size_t>> open;  // begins waiting for their end, innermost last
  std::vector<int64_t> raw_begin;           // raw clock, converted once the offset is known
  std::vector<int64_t> raw_end;
  // Lines are viewed in place: the log is not copied a second time.
  const std::string_view all(*text);
  for (size_t at = 0; at < all.size();) {
    const size_t nl = std::min(all.find('\n', at), all.size());
    const std::string_view line = all.substr(at, nl - at);
    at = nl + 1;
    if (line.empty()) continue;
    auto j = parse_json_limited(line, path, {.max_depth = 8});
    if (!j.ok() || !j->is_object() || !(*j).contains("t_ns") || !(*j)["t_ns"].is_number_integer()) {
      ++r.skipped_lines;
      continue;
    }
    const nlohmann::json& e = *j;
    const std::string ev = str_of(e, "ev");
    const int64_t t = e["t_ns"].get<int64_t>();
    if (ev == "meta") {
      if (e.contains("host") && e["host"].is_string()) r.host = e["host"].get<std::string>();
      r.dp = static_cast<int>(int_of(e, "dp", r.dp));
      r.pp = static_cast<int>(int_of(e, "pp", r.pp));
      r.tp = static_cast<int>(int_of(e, "tp", r.tp));
      r.clock_offset_ns = int_of(e, "clock_offset_ns", 0);
      continue;
    }
    const Key key{str_of(e, "kind"), str_of(e, "name"), str_of(e, "group"), int_of(e, "seq", -1)};
    if (ev == "begin" && std::get<0>(key) == "abort") {
      r.abort_reason = std::get<1>(key);
      r.abort_ns = t;  // raw until the offset is applied below
      continue;
    }
    if (ev == "begin") {
      Slice s;
      std::tie(s.kind, s.name, s.group, s.seq) = key;
      s.bytes = int_of(e, "bytes", 0);
      open[key].push_back(r.slices.size());
      r.slices.push_back(std::move(s));
      raw_begin.push_back(t);
      raw_end.push_back(-1);
    } else if (ev == "end") {
      auto it = open.find(key);
      if (it == open.end() || it->second.empty()) {
        ++r.skipped_lines;
        continue;
      }
      raw_end[it->second.back()] = t;
      it->second.pop_back();
    } else {
      ++r.skipped_lines;
    }
  }
  if (r.abort_ns >= 0) r.abort_ns -= r.clock_offset_ns;
  for (size_t i = 0; i < r.slices.size(); ++i) {
    r.slices[i].t_begin_ns = raw_begin[i] - r.clock_offset_ns;
    r.slices[i].t_end_ns = raw_end[i] < 0 ? -1 : raw_end[i] - r.clock_offset_ns;
    r.last_event_ns = std::max({r.last_event_ns, r.slices[i].t_begin_ns, r.slices[i].t_end_ns});
  }
}

void read_heartbeat(const std::string& path, RankTrail& r) {
  auto hb = dump::read_heartbeat(path);
  if (!hb.ok()) return;
  r.has_heartbeat = true;
  r.heartbeat_ns = hb->t_ns - r.clock_offset_ns;
  r.hb_phase = hb->phase;
  r.hb_current = hb->current;
  r.hb_stopped = hb->stopped;
  if (r.host == "?" && !hb->host.empty()) r.host = hb->host;
}

}  // namespace

Result<RunTrails> load_run_trails(const std::string& run_dir) {
  if (!fs::is_directory(fs::path(run_dir) / dump::kEventsDirName))
    return Status::NotFound(run_dir + ": no " + dump::kEventsDirName + "/ folder; not a dayzero run folder");
  RunTrails t;
  t.run_dir = run_dir;
  const int world = world_size_of(run_dir);
  bool any = false;
  for (int r = 0; r < world; ++r) {
    RankTrail trail;
    trail.rank = r;
    read_log(dump::event_log_path(run_dir, r), trail);
    read_heartbeat(dump::heartbeat_path(run_dir, r), trail);
    any |= trail.has_log;
    t.ranks.push_back(std::move(trail));
  }
  if (!any) return Status::InvalidArgument(run_dir + ": no readable event log under " + dump::kEventsDirName + "/");
  bool first = true;
  for (const RankTrail& r : t.ranks) {
    for (const Slice& s : r.slices) {
      if (first || s.t_begin_ns < t.t0_ns) t.t0_ns = s.t_begin_ns;
      first = false;
    }
    t.end_ns = std::max({t.end_ns, r.last_event_ns, r.abort_ns});
  }
  // Heartbeats only where no rank wrote anything else: a rank whose MPI_Abort blocks keeps
  // beating for the abort's grace period, which must not make the others look dead.
  if (t.end_ns <= 0)
    for (const RankTrail& r : t.ranks) t.end_ns = std::max(t.end_ns, r.heartbeat_ns);
  return t;
}

nlohmann::ordered_json chrome_trace(const RunTrails& t) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  std::vector<std::string> nodes;
  const auto node_of = [&](const std::string& host) {
    auto it = std::find(nodes.begin(), nodes.end(), host);
    if (it != nodes.end()) return static_cast<int>(it - nodes.begin());
    nodes.push_back(host);
    return static_cast<int>(nodes.size()) - 1;
  };
  const auto us = [&](int64_t ns) { return static_cast<double>(ns - t.t0_ns) / 1000.0; };
  for (const RankTrail& r : t.ranks) {
    if (!r.has_log) continue;
    const int pid = node_of(r.host);
    std::string tname = "rank " + std::to_string(r.rank);
    if (r.pp >= 0) tname += " (pp " + std::to_string(r.pp) + ", tp " + std::to_string(r.tp) + ")";
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", r.rank}, {"args", {{"name", tname}}}});
    for (const Slice& s : r.slices) {
      const int64_t end = s.open() ? t.end_ns : s.t_end_ns;
      nlohmann::ordered_json args = {{"kind", s.kind}};
      if (!s.group.empty()) args["group"] = s.group;
      if (s.seq >= 0) args["seq"] = s.seq;
      if (s.bytes > 0) args["bytes"] = s.bytes;
      if (s.open()) args["open"] = true;
      std::string name = s.name;
      if (s.seq >= 0) name += " #" + std::to_string(s.seq);
      events.push_back({{"ph", "X"}, {"name", name}, {"cat", s.kind}, {"pid", pid}, {"tid", r.rank},
                        {"ts", us(s.t_begin_ns)}, {"dur", std::max(0.0, us(end) - us(s.t_begin_ns))}, {"args", args}});
    }
  }
  for (size_t n = 0; n < nodes.size(); ++n)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", static_cast<int>(n)}, {"args", {{"name", nodes[n]}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace dayzero::diag
