// Event logs and heartbeats of a run folder, streamed once, paired, aligned to rank 0's clock
// and summarised per rank and per (group, seq).
#include "diag/timeline_merge.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/json.h"
#include "dump/heartbeat.h"
#include "dump/run_folder.h"

namespace dayzero::diag {
namespace fs = std::filesystem;
namespace {

// Largest event log read (a 1 M-line log of a long run is ~150 MiB; logs are streamed, so
// the limit bounds time, not memory).
constexpr uint64_t kMaxEventLogBytes = 64ull << 30;

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

constexpr size_t kMaxLineBytes = 64 << 10;   // a longer line is skipped as malformed
constexpr size_t kReadChunk = 4 << 20;

// One begin or end line: the strings view the line being parsed.
struct Line {
  int64_t t = 0, seq = -1, bytes = 0;
  bool begin = false;
  std::string_view kind, name, group;
};

// The dedicated parser: exactly the layout EventLog::append writes,
// {"t_ns":T,"ev":"begin"|"end","kind":"K","name":"N","group":"G","seq":S,"bytes":B}, with
// strings of printable ASCII other than '"' and '\' and integers of at most 19 digits (int64) without
// leading zeros. Anything else returns false and goes to the JSON reader, which decides.
class FastParser {
 public:
  explicit FastParser(std::string_view s) : s_(s) {}
  bool parse(Line& out) {
    bool ok = lit("{\"t_ns\":") && integer(out.t) && lit(",\"ev\":\"");
    if (!ok) return false;
    if (lit("begin\"")) out.begin = true;
    else if (lit("end\"")) out.begin = false;
    else return false;
    return lit(",\"kind\":\"") && str(out.kind) && lit(",\"name\":\"") && str(out.name) && lit(",\"group\":\"") &&
           str(out.group) && lit(",\"seq\":") && integer(out.seq) && lit(",\"bytes\":") && integer(out.bytes) &&
           lit("}") && at_ == s_.size();
  }

 private:
  bool lit(std::string_view l) {
    if (s_.substr(at_, l.size()) != l) return false;
    at_ += l.size();
    return true;
  }
  bool integer(int64_t& v) {
    bool neg = false;
    if (at_ < s_.size() && s_[at_] == '-') neg = true, ++at_;
    const size_t start = at_;
    uint64_t x = 0;  // 19 digits fit
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9' && at_ - start < 20) x = x * 10 + (s_[at_++] - '0');
    const size_t n = at_ - start;
    if (n == 0 || n > 19 || (n > 1 && s_[start] == '0') || x > static_cast<uint64_t>(INT64_MAX)) return false;
    v = neg ? -static_cast<int64_t>(x) : static_cast<int64_t>(x);
    return true;
  }
  bool str(std::string_view& v) {  // after the opening quote; consumes the closing one
    const size_t start = at_;
    while (at_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[at_]);
      if (c == '"') {
        v = s_.substr(start, at_ - start);
        ++at_;
        return true;
      }
      if (c < 0x20 || c > 0x7e || c == '\\') return false;
      ++at_;
    }
    return false;
  }
  std::string_view s_;
  size_t at_ = 0;
};

// Small string interning for one rank's kinds, names and groups; the last hit is remembered
// per field, since consecutive lines mostly repeat them.
class Interner {
 public:
  uint32_t id(std::string_view s, uint32_t& last) {
    if (last < strings_.size() && strings_[last] == s) return last;
    auto it = ids_.find(std::string(s));
    if (it == ids_.end()) {
      it = ids_.emplace(std::string(s), static_cast<uint32_t>(strings_.size())).first;
      strings_.emplace_back(s);
    }
    return last = it->second;
  }
  const std::string& str(uint32_t id) const { return strings_[id]; }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> ids_;
};

struct RawSlice {  // raw clock; 48 bytes
  int64_t begin = 0, end = -1, seq = -1, bytes = 0;
  uint32_t kind = 0, name = 0, group = 0;
  bool comm = false;
};

struct RankParse {
  Interner strings;
  uint32_t last_kind = ~0u, last_name = ~0u, last_group = ~0u;
  std::vector<RawSlice> slices;
  struct Key {
    uint32_t kind, name, group;
    int64_t seq;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<int64_t>()(k.seq * 1000003 + (static_cast<int64_t>(k.group) << 20) + (k.name << 8) + k.kind);
    }
  };
  // Begins waiting for their end: a stack in begin order while it is shallow (an end matches
  // the latest open begin of its key, found by scanning from the top), a map of per-key stacks
  // once a log leaves more than kMaxStack open, so no log costs quadratic time.
  static constexpr size_t kMaxStack = 64;
  std::vector<uint32_t> stack;
  bool use_map = false;
  std::unordered_map<Key, std::vector<uint32_t>, KeyHash> open;
  Key key_of(const RawSlice& s) const { return {s.kind, s.name, s.group, s.seq}; }
  void push(const Key& k, uint32_t idx) {
    if (use_map) {
      open[k].push_back(idx);
      return;
    }
    stack.push_back(idx);
    if (stack.size() > kMaxStack) {
      for (uint32_t i : stack) open[key_of(slices[i])].push_back(i);
      stack.clear();
      use_map = true;
    }
  }
  // The slice an end of key k closes, or -1.
  int64_t pop(const Key& k) {
    if (use_map) {
      auto it = open.find(k);
      if (it == open.end()) return -1;
      const uint32_t idx = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) open.erase(it);
      return idx;
    }
    for (size_t i = stack.size(); i-- > 0;)
      if (key_of(slices[stack[i]]) == k) {
        const uint32_t idx = stack[i];
        stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(i));
        return idx;
      }
    return -1;
  }
};

void take_line(std::string_view line, const std::string& path, RankTrail& r, RankParse& p) {
  Line l;
  std::string kind_s, name_s, group_s;  // owners for lines read by the JSON reader
  if (!FastParser(line).parse(l)) {
    auto j = parse_json_limited(line, path, {.max_depth = 8});
    if (!j.ok() || !j->is_object() || !(*j).contains("t_ns") || !(*j)["t_ns"].is_number_integer()) {
      ++r.skipped_lines;
      return;
    }
    const nlohmann::json& e = *j;
    const std::string ev = str_of(e, "ev");
    l.t = e["t_ns"].get<int64_t>();
    if (ev == "meta") {
      if (e.contains("host") && e["host"].is_string()) r.host = e["host"].get<std::string>();
      r.dp = static_cast<int>(int_of(e, "dp", r.dp));
      r.pp = static_cast<int>(int_of(e, "pp", r.pp));
      r.tp = static_cast<int>(int_of(e, "tp", r.tp));
      r.clock_offset_ns = int_of(e, "clock_offset_ns", 0);
      return;
    }
    if (ev != "begin" && ev != "end") {
      ++r.skipped_lines;
      return;
    }
    l.begin = ev == "begin";
    kind_s = str_of(e, "kind"), name_s = str_of(e, "name"), group_s = str_of(e, "group");
    l.kind = kind_s, l.name = name_s, l.group = group_s;
    l.seq = int_of(e, "seq", -1);
    l.bytes = int_of(e, "bytes", 0);
  }
  if (l.begin && l.kind == "abort") {
    r.abort_reason = std::string(l.name);
    r.abort_ns = l.t;  // raw until the offset is applied
    return;
  }
  const RankParse::Key key{p.strings.id(l.kind, p.last_kind), p.strings.id(l.name, p.last_name),
                           p.strings.id(l.group, p.last_group), l.seq};
  if (l.begin) {
    RawSlice s;
    s.begin = l.t;
    s.seq = l.seq;
    s.bytes = l.bytes;
    s.kind = key.kind, s.name = key.name, s.group = key.group;
    s.comm = l.kind == "collective" || l.kind == "p2p";
    p.slices.push_back(s);
    p.push(key, static_cast<uint32_t>(p.slices.size() - 1));
  } else {
    const int64_t idx = p.pop(key);
    if (idx < 0) {
      ++r.skipped_lines;
      return;
    }
    p.slices[static_cast<size_t>(idx)].end = l.t;
  }
}

// Streams path in chunks, line by line. false when it cannot be opened as a regular file.
bool stream_log(const std::string& path, RankTrail& r, RankParse& p, std::string& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxEventLogBytes) {
    ::close(fd);
    return false;
  }
  buf.resize(kReadChunk + kMaxLineBytes);  // once per thread: reused rank after rank
  size_t have = 0;       // bytes in buf
  bool skipping = false; // inside a line longer than kMaxLineBytes
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || (total += static_cast<uint64_t>(n)) > kMaxEventLogBytes) break;
    have += static_cast<size_t>(n);
    const std::string_view all(buf.data(), have);
    size_t at = 0;
    for (;;) {
      const size_t nl = all.find('\n', at);
      if (nl == std::string_view::npos) break;
      if (!skipping && nl > at) take_line(all.substr(at, nl - at), path, r, p);
      skipping = false;
      at = nl + 1;
    }
    if (have - at > kMaxLineBytes) {  // no newline within the limit: skip the rest of this line
      if (!skipping) ++r.skipped_lines;
      skipping = true;
      at = have;
    }
    std::memmove(buf.data(), buf.data() + at, have - at);
    have -= at;
  }
  if (!skipping && have > 0) take_line(std::string_view(buf.data(), have), path, r, p);
  ::close(fd);
  return true;
}

// Shared tables the rank summaries merge into, under one mutex.
struct Merge {
  std::mutex mu;
  std::map<std::string, size_t> group_index;  // label -> index into groups
  std::vector<GroupAggregate> groups;
  std::map<std::string, uint16_t> op_index;
  std::vector<std::string> op_names;
};

SeqAggregate* seq_slot(GroupAggregate& g, int64_t seq) {
  // Seqs run 0, 1, 2, ... per group: a dense vector, grown for seqs just past its end; others
  // (negative, or a hostile file's far-ahead seq) go to the map, so no line reserves much memory.
  if (seq >= 0 && seq < static_cast<int64_t>(g.dense.size())) return &g.dense[static_cast<size_t>(seq)];
  if (seq >= 0 && seq <= static_cast<int64_t>(g.dense.size()) * 2 + 4096) {
    g.dense.resize(static_cast<size_t>(seq) + 1);
    return &g.dense[static_cast<size_t>(seq)];
  }
  return &g.sparse[seq];
}

// Converts one rank's parsed slices into its summary and merges its communication into the
// shared (group, seq) aggregates; keeps the slices themselves only when asked.
void summarise(RankParse& p, RankTrail& r, Merge& m, bool keep_slices) {
  if (r.abort_ns >= 0) r.abort_ns -= r.clock_offset_ns;
  const int64_t off = r.clock_offset_ns;
  r.n_slices = static_cast<int64_t>(p.slices.size());
  for (RawSlice& s : p.slices) {
    s.begin -= off;
    if (s.end >= 0) s.end -= off;
    r.last_event_ns = std::max({r.last_event_ns, s.begin, s.end});
    if (r.first_begin_ns < 0 || s.begin < r.first_begin_ns) r.first_begin_ns = s.begin;
  }
  const auto op_text = [&](const RawSlice& s) {
    if (s.comm) return p.strings.str(s.name) + " #" + std::to_string(s.seq) + " of " + p.strings.str(s.group);
    return p.strings.str(s.kind) + " " + p.strings.str(s.name);
  };
  std::map<std::pair<uint32_t, uint32_t>, size_t> phase_at;
  // Per group of this rank: (seq, slice index), in begin order.
  std::map<uint32_t, std::vector<std::pair<int64_t, uint32_t>>> comm;
  const RawSlice* last = nullptr;
  const RawSlice* waiting = nullptr;
  const RawSlice* last_comm = nullptr;
  for (uint32_t i = 0; i < p.slices.size(); ++i) {
    const RawSlice& s = p.slices[i];
    const bool open = s.end < 0;
    if ((open ? s.begin : s.end) >= r.last_event_ns) last = &s;
    if (s.comm) {
      comm[s.group].emplace_back(s.seq, i);
      last_comm = &s;
      if (open) waiting = &s;
    } else if (!open) {
      auto [it, fresh] = phase_at.emplace(std::make_pair(s.kind, s.name), r.phases.size());
      if (fresh) r.phases.push_back({p.strings.str(s.kind), p.strings.str(s.name), 0});
      r.phases[it->second].seconds += static_cast<double>(s.end - s.begin) * 1e-9;
    }
  }
  // Communication inside the rank's phase prompts, by group kind.
  for (const RawSlice& s : p.slices)
    if (!s.comm && s.end >= 0 && p.strings.str(s.kind) == "phase" && p.strings.str(s.name) == "prompts") {
      r.prompts_s = static_cast<double>(s.end - s.begin) * 1e-9;
      for (const RawSlice& c : p.slices) {
        if (!c.comm || c.end < 0 || c.begin < s.begin || c.end > s.end) continue;
        const std::string& label = p.strings.str(c.group);
        const std::string kind = label.substr(0, label.find('@'));
        auto it = std::find_if(r.prompts_comm_s.begin(), r.prompts_comm_s.end(),
                               [&](const auto& e) { return e.first == kind; });
        if (it == r.prompts_comm_s.end()) it = r.prompts_comm_s.insert(it, {kind, 0.0});
        it->second += static_cast<double>(c.end - c.begin) * 1e-9;
      }
      break;
    }
  if (last) r.last_event = std::string(last->end < 0 ? "begin of " : "end of ") + op_text(*last);
  if (waiting) r.waiting_in = op_text(*waiting), r.waiting_begin_ns = waiting->begin;
  if (last_comm) r.last_comm_group = p.strings.str(last_comm->group);

  // One slice per (group, seq) and rank, the last in begin order (as a rank re-entering a seq
  // replaces its earlier entry).
  for (auto& [group, v] : comm) {
    std::stable_sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    size_t w = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (w > 0 && v[w - 1].first == v[i].first) v[w - 1] = v[i];
      else v[w++] = v[i];
    }
    v.resize(w);
  }
  {
    std::lock_guard<std::mutex> lock(m.mu);
    for (auto& [group, v] : comm) {
      const std::string& label = p.strings.str(group);
      auto [gi, fresh] = m.group_index.emplace(label, m.groups.size());
      if (fresh) m.groups.push_back(GroupAggregate{label, {}, {}, {}});
      GroupAggregate& g = m.groups[gi->second];
      g.members.insert(std::upper_bound(g.members.begin(), g.members.end(), r.rank), r.rank);
      GroupPresence pr;
      pr.group = static_cast<int>(gi->second);
      for (const auto& [seq, idx] : v) {
        const RawSlice& s = p.slices[idx];
        if (!pr.entered.empty() && pr.entered.back().second + 1 == seq) pr.entered.back().second = seq;
        else pr.entered.emplace_back(seq, seq);
        if (s.end < 0) pr.open.push_back(seq);
        SeqAggregate& a = *seq_slot(g, seq);
        if (a.entered == 0) a.min_begin_ns = a.max_begin_ns = s.begin, a.last_rank = r.rank;
        a.min_begin_ns = std::min(a.min_begin_ns, s.begin);
        if (s.begin > a.max_begin_ns || (s.begin == a.max_begin_ns && r.rank < a.last_rank))
          a.max_begin_ns = s.begin, a.last_rank = r.rank;
        ++a.entered;
        if (s.end >= 0) ++a.completed;
        if (r.rank > a.name_rank) {
          a.name_rank = r.rank;
          const std::string& op = p.strings.str(s.name);
          auto [oi, op_fresh] = m.op_index.emplace(op, static_cast<uint16_t>(std::min<size_t>(m.op_names.size(), 65535)));
          if (op_fresh && m.op_names.size() < 65536) m.op_names.push_back(op);
          a.op = oi->second;
          a.p2p = p.strings.str(s.kind) == "p2p";
        }
      }
      r.presence.push_back(std::move(pr));
    }
  }
  if (keep_slices) {
    r.slices.reserve(p.slices.size());
    for (const RawSlice& s : p.slices)
      r.slices.push_back({s.begin, s.end, p.strings.str(s.kind), p.strings.str(s.name), p.strings.str(s.group), s.seq,
                          s.bytes});
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

bool GroupPresence::has(int64_t seq) const {
  auto it = std::upper_bound(entered.begin(), entered.end(), seq,
                             [](int64_t s, const std::pair<int64_t, int64_t>& iv) { return s < iv.first; });
  return it != entered.begin() && std::prev(it)->second >= seq;
}

bool GroupPresence::completed(int64_t seq) const {
  return has(seq) && !std::binary_search(open.begin(), open.end(), seq);
}

Result<RunTrails> load_run_trails(const std::string& run_dir, const TrailOptions& options) {
  // A run folder (it has plan.json) without events/ ran with dump.event_log: off.
  if (!fs::is_directory(fs::path(run_dir) / dump::kEventsDirName) && fs::is_regular_file(fs::path(run_dir) / dump::kPlanFileName))
    return Status::InvalidArgument(run_dir + ": no readable event log under " + dump::kEventsDirName +
                                   "/ (none was written: the run had dump.event_log: off; its hang reports hold each rank's last events)");
  if (!fs::is_directory(fs::path(run_dir) / dump::kEventsDirName))
    return Status::NotFound(run_dir + ": no " + dump::kEventsDirName + "/ folder; not a dayzero run folder");
  RunTrails t;
  t.run_dir = run_dir;
  const int world = world_size_of(run_dir);
  t.ranks.resize(static_cast<size_t>(std::max(world, 0)));
  Merge merge;
  std::atomic<int> next{0};
  const auto work = [&] {
    std::string buf;
    for (int r; (r = next++) < world;) {
      RankTrail& trail = t.ranks[static_cast<size_t>(r)];
      trail.rank = r;
      RankParse p;
      trail.has_log = stream_log(dump::event_log_path(run_dir, r), trail, p, buf);
      summarise(p, trail, merge, options.keep_slices);
      read_heartbeat(dump::heartbeat_path(run_dir, r), trail);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < std::max(1, options.threads); ++i) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  bool any = false;
  for (const RankTrail& r : t.ranks) any |= r.has_log;
  if (!any) return Status::InvalidArgument(run_dir + ": no readable event log under " + dump::kEventsDirName + "/");
  // Group indices by label order, so the result does not depend on which thread merged first.
  std::vector<size_t> order(merge.groups.size());
  std::vector<int> new_index(merge.groups.size());
  size_t k = 0;
  for (const auto& [label, gi] : merge.group_index) order[k] = gi, new_index[gi] = static_cast<int>(k), ++k;
  for (size_t i = 0; i < order.size(); ++i) t.groups.push_back(std::move(merge.groups[order[i]]));
  std::vector<std::string> op_sorted = merge.op_names;  // op ids stay as merged: names only looked up
  t.op_names = std::move(op_sorted);
  bool first = true;
  for (RankTrail& r : t.ranks) {
    for (GroupPresence& pr : r.presence) pr.group = new_index[static_cast<size_t>(pr.group)];
    std::sort(r.presence.begin(), r.presence.end(), [](const auto& x, const auto& y) { return x.group < y.group; });
    if (r.first_begin_ns >= 0 && (first || r.first_begin_ns < t.t0_ns)) t.t0_ns = r.first_begin_ns, first = false;
    t.end_ns = std::max({t.end_ns, r.last_event_ns, r.abort_ns});
  }
  // Heartbeats only where no rank wrote anything else: a rank whose MPI_Abort blocks keeps
  // beating for the abort's grace period, which must not make the others look dead.
  if (t.end_ns <= 0)
    for (const RankTrail& r : t.ranks) t.end_ns = std::max(t.end_ns, r.heartbeat_ns);
  t.launcher = read_launcher_record(run_dir);
  return t;
}

LauncherRecord read_launcher_record(const std::string& run_dir) {
  LauncherRecord l;
  const fs::path dir = fs::path(run_dir) / "launch";
  auto launch = read_json_file((dir / "launch.json").string(), {.max_depth = 16});
  if (launch.ok() && launch->is_object() && (*launch)["launcher_host"].is_string())
    l.host = (*launch)["launcher_host"].get<std::string>();
  auto sup = read_json_file((dir / "supervisor.json").string(), {.max_depth = 8});
  if (sup.ok() && sup->is_object() && sup->value("ended_launcher", false) == true) {
    l.ended_by_supervisor = true;
    if ((*sup)["signal"].is_string()) l.signal = (*sup)["signal"].get<std::string>();
    if ((*sup)["first_report"].is_string()) l.first_report = (*sup)["first_report"].get<std::string>();
    if ((*sup)["waited_s"].is_number()) l.waited_s = (*sup)["waited_s"].get<double>();
  }
  return l;
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
