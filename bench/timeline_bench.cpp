// Timeline analysis benchmark (not a test): writes a synthetic run folder of N ranks x E event
// lines per rank in the format the runtime writes (events/rank-N.jsonl: a "meta" line as
// run_folder.cpp writes it, then begin/end lines as EventLog::append writes them; live/rank-N.json
// heartbeats as Heartbeat writes them; plan.json with the world size), then times what
// `dayzero timeline` does with it: load_run_trails + analyse + to_text. Prints seconds,
// event lines/s and the peak RSS (peak_rss_bytes), against the target of 1024 ranks x
// 100k events in under 30 s. The files are read from a warm page cache (just written).
// Layout: tp 8 x pp 2 x dp N/16 (N a multiple of 16); per rank a "load" phase, a "prefill"
// phase holding tp all_reduces (8 MiB) with every 8th op a dp all_reduce, and the last tp op
// of tp group 0 left hanging: rank 3 never enters it, its peers stay inside it.
// Usage: timeline_bench [--dir DIR] [--ranks N] [--events E] [--keep 1] [--threads T]
// (DIR defaults to build/bench-timeline; the folder is removed at the end unless --keep 1).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/clock.h"
#include "diag/timeline_analysis.h"
#include "diag/timeline_merge.h"
#include "dump/event_log.h"
#include "dump/run_folder.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

constexpr int kTp = 8, kPp = 2;
constexpr int kHangRank = 3;  // in tp group 0; never enters that group's last op

double seconds_since(int64_t t0) { return static_cast<double>(monotonic_ns() - t0) * 1e-9; }

// CPU seconds (user + system) this process has used, all threads.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : 0;
}

double peak_rss_gib() { return static_cast<double>(peak_rss_bytes()) / (1u << 30); }

// One line exactly as EventLog::append writes it (checked against it in main).
void append_line(std::string& out, int64_t t, const char* ev, const char* kind, const char* name,
                 const std::string& group, int64_t seq, int64_t bytes) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf,
                              "{\"t_ns\":%lld,\"ev\":\"%s\",\"kind\":\"%s\",\"name\":\"%s\",\"group\":\"%s\","
                              "\"seq\":%lld,\"bytes\":%lld}\n",
                              static_cast<long long>(t), ev, kind, name, group.c_str(),
                              static_cast<long long>(seq), static_cast<long long>(bytes));
  out.append(buf, static_cast<size_t>(n));
}

struct Coord {
  int dp, pp, tp;
};
Coord coord_of(int rank) { return {rank / (kTp * kPp), (rank / kTp) % kPp, rank % kTp}; }

// Writes rank r's event log and heartbeat; returns the bytes of the log.
uint64_t write_rank(const fs::path& dir, int r, int world, int64_t events, int64_t t_start) {
  const Coord c = coord_of(r);
  const int64_t offset = 1000LL * r;  // rank r's clock runs r us ahead of rank 0's
  const std::string host = "node" + std::to_string(r / 8);
  const std::string tp_group = "tp@pp" + std::to_string(c.pp) + ".dp" + std::to_string(c.dp);
  const std::string dp_group = "dp@pp" + std::to_string(c.pp) + ".tp" + std::to_string(c.tp);
  const bool hang_group = c.dp == 0 && c.pp == 0;  // tp group 0, where kHangRank sits
  nlohmann::ordered_json meta = {{"rank", r}, {"world_size", world}, {"host", host}, {"dp", c.dp},
                                 {"pp", c.pp}, {"tp", c.tp}, {"ep", 0}, {"etp", 0},
                                 {"clock_offset_ns", offset}};
  nlohmann::ordered_json j;
  j["t_ns"] = t_start + offset;
  j["ev"] = "meta";
  for (auto it = meta.begin(); it != meta.end(); ++it) j[it.key()] = it.value();
  std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";

  // Lines: meta, load begin/end, prefill begin, ops (2 lines each), prefill end.
  // The last op is a tp one (never a dp one), so only tp group 0 is left inside an op.
  int64_t ops = std::max<int64_t>(1, (events - 5) / 2);
  if (ops % 8 == 0) --ops;
  const std::string none;
  int64_t t = t_start + 1000000 + offset + (r % 7) * 3000;
  append_line(out, t, "begin", "phase", "load", none, -1, 0);
  t += 2000000000 + (r % 13) * 1000000;
  append_line(out, t, "end", "phase", "load", none, -1, 0);
  append_line(out, t += 1000, "begin", "phase", "prefill", none, -1, 0);
  std::ofstream f(dump::event_log_path(dir.string(), r), std::ios::binary | std::ios::trunc);
  uint64_t bytes = 0;
  int64_t tp_seq = 0, dp_seq = 0;
  bool hung = false;
  std::string current = "phase prefill";
  for (int64_t i = 0; i < ops; ++i) {
    const bool dp_op = i % 8 == 7;
    const std::string& g = dp_op ? dp_group : tp_group;
    const int64_t seq = dp_op ? dp_seq++ : tp_seq++;
    if (hang_group && i == ops - 1) {
      if (r == kHangRank) {
        hung = true;
        break;
      }
      append_line(out, t += 50000 + (r % 5) * 2000, "begin", "collective", "all_reduce", g, seq, 8 << 20);
      current = "collective all_reduce #" + std::to_string(seq) + " of " + g;
      hung = true;
      break;
    }
    append_line(out, t += 50000 + (r % 5) * 2000, "begin", "collective", dp_op ? "all_gather" : "all_reduce", g, seq,
                8 << 20);
    append_line(out, t += 200000, "end", "collective", dp_op ? "all_gather" : "all_reduce", g, seq, 8 << 20);
    if (out.size() > (1u << 20)) {
      f.write(out.data(), static_cast<std::streamsize>(out.size()));
      bytes += out.size();
      out.clear();
    }
  }
  if (!hung) append_line(out, t += 1000, "end", "phase", "prefill", none, -1, 0);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  bytes += out.size();
  f.close();
  if (!f) {
    std::fprintf(stderr, "timeline_bench: cannot write rank %d's event log\n", r);
    std::exit(2);
  }
  // Heartbeat, as Heartbeat::write_beat: hung ranks beat on, the others stopped.
  nlohmann::ordered_json hb;
  hb["rank"] = r;
  hb["t_ns"] = t + 1000000;  // t is on this rank's clock already
  hb["phase"] = "prefill";
  hb["current"] = hung ? current : std::string();
  hb["pid"] = 1000 + r;
  hb["host"] = host;
  hb["beat"] = 100;
  hb["stopped"] = !hung;
  std::ofstream(dump::heartbeat_path(dir.string(), r), std::ios::binary) << hb.dump() << "\n";
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-timeline";
  int ranks = 1024;
  int64_t events = 100000;
  bool keep = false;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    else if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (k == "--events") events = std::atoll(argv[i + 1]);
    else if (k == "--keep") keep = std::atoi(argv[i + 1]) != 0;
    else if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: timeline_bench [--dir DIR] [--ranks N] [--events E] [--keep 1] [--threads T]\n");
      return 2;
    }
  }
  if (ranks < 16 || ranks % 16 != 0 || events < 16) {
    std::fprintf(stderr, "timeline_bench: --ranks must be a multiple of 16, --events at least 16\n");
    return 2;
  }
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir) / dump::kEventsDirName);
  fs::create_directories(fs::path(dir) / dump::kLiveDirName);

  // The fast formatter must write what EventLog::append writes.
  {
    const std::string p = (fs::path(dir) / "format-check.jsonl").string();
    auto log = dump::EventLog::open(p);
    if (!log.ok() || !(*log)->append(123, "begin", "collective", "all_reduce", "tp@pp0.dp1", 7, 8 << 20).ok()) {
      std::fprintf(stderr, "timeline_bench: EventLog failed\n");
      return 2;
    }
    log->reset();
    std::ifstream in(p, std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string mine;
    append_line(mine, 123, "begin", "collective", "all_reduce", "tp@pp0.dp1", 7, 8 << 20);
    fs::remove(p);
    if (got != mine) {
      std::fprintf(stderr, "timeline_bench: line format differs from EventLog:\n  %s  %s", got.c_str(), mine.c_str());
      return 2;
    }
  }

  // Size check before writing: about 125 bytes a line.
  const double est_gib = static_cast<double>(ranks) * static_cast<double>(events) * 125.0 / (1u << 30);
  const double free_gib = static_cast<double>(fs::space(dir).available) / (1u << 30);
  std::printf("synthetic run: %d ranks (tp %d, pp %d, dp %d) x %lld event lines, ~%.2f GiB (disk free %.1f GiB)\n", ranks,
              kTp, kPp, ranks / (kTp * kPp), static_cast<long long>(events), est_gib, free_gib);
  if (est_gib > 0.5 * free_gib) {
    std::fprintf(stderr, "timeline_bench: would use more than half the free disk; pass smaller --ranks/--events\n");
    return 2;
  }
  std::ofstream(fs::path(dir) / dump::kPlanFileName) << "{\"world_size\": " << ranks << "}\n";
  const int64_t tw = monotonic_ns();
  uint64_t bytes = 0;
  const int64_t t_start = 1'800'000'000'000'000'000LL;
  for (int r = 0; r < ranks; ++r) bytes += write_rank(dir, r, ranks, events, t_start);
  std::printf("written: %.2f GiB in %.1f s; peak RSS so far %.3f GiB\n", static_cast<double>(bytes) / (1u << 30),
              seconds_since(tw), peak_rss_gib());

  const double cpu0 = cpu_seconds();
  const int64_t t0 = monotonic_ns();
  auto trails = diag::load_run_trails(dir, {.keep_slices = false, .threads = threads});
  const double load_s = seconds_since(t0);
  if (!trails.ok()) {
    std::fprintf(stderr, "timeline_bench: %s\n", trails.status().message().c_str());
    return 2;
  }
  const double rss_load = peak_rss_gib();
  const int64_t t1 = monotonic_ns();
  const diag::Analysis an = diag::analyse(*trails);
  const std::string text = diag::to_text(an);
  const double analyse_s = seconds_since(t1);
  const double total_s = load_s + analyse_s;
  const double cpu_s = cpu_seconds() - cpu0;

  int64_t lines = 0, slices = 0, skipped = 0;
  for (const auto& r : trails->ranks) {
    slices += r.n_slices;
    skipped += r.skipped_lines;
  }
  for (int r = 0; r < ranks; ++r) {  // every line ends in '\n'
    std::ifstream in(dump::event_log_path(dir, r), std::ios::binary);
    char buf[1 << 16];
    while (in.read(buf, sizeof buf), in.gcount() > 0) lines += std::count(buf, buf + in.gcount(), '\n');
  }
  std::printf("load_run_trails: %.2f s; analyse + to_text: %.2f s; total %.2f s (%.2f CPU s over %d thread(s); load average %.1f)\n",
              load_s, analyse_s, total_s, cpu_s, threads, load_average());
  std::printf("event lines: %lld (%lld slices, %lld skipped); %.2f M lines/s\n", static_cast<long long>(lines),
              static_cast<long long>(slices), static_cast<long long>(skipped), static_cast<double>(lines) / total_s * 1e-6);
  std::printf("peak RSS: %.3f GiB after load, %.3f GiB after analysis (%.0f bytes per event line)\n", rss_load,
              peak_rss_gib(), peak_rss_gib() * (1u << 30) / static_cast<double>(lines));
  std::printf("culprits:");
  for (int c : an.culprits) std::printf(" %d", c);
  std::printf(" (expected %d)\nverdict: %.200s\n", kHangRank, an.verdict.c_str());
  const double scaled = total_s * (1024.0 * 100000.0) / static_cast<double>(lines);
  std::printf("target: 1024 ranks x 100k events in < 30 s; this run scaled linearly to that size: %.1f s (%s)\n",
              scaled, scaled < 30 ? "met" : "NOT met");
  if (!keep) fs::remove_all(dir);
  return an.culprits.size() == 1 && an.culprits[0] == kHangRank ? 0 : 1;
}
