// Start-up tuning of the small-M kernel on the weights this process holds: every candidate
// setting (m = 1 tile width x prefetch distance) is first checked against the double-precision
// reference and against the default setting bit for bit, then timed at m = 1 (batch-1 decode)
// over the weights, interleaved round after round within a time budget; the fastest is kept.
// The candidates only differ in how w is streamed, never in what an output sums, so the choice
// changes speed and not bits. A result is cached per CPU, thread count and weight shapes.
#include "kernels/cpu/gemm_tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace dayzero::kernels::cpu::gemm {
namespace {

namespace fs = std::filesystem;

// The timing interleaves the candidates weight by weight (tune_small_m), so each is compared
// with the others within milliseconds: the memory bandwidth of a shared VM swings by a fifth over
// tens of milliseconds (64 MiB sweeps one after another on the 2-vCPU EPYC read 12-19 GB/s), and
// a whole sweep per candidate chose a setting 2-12 % slower than the best in most starts there
// (docs/gemm.md, "Chosen by measuring").
// A weight larger than this is timed in pieces of about this size (a decode product's weight
// is read whole, 1-60 MB).
constexpr int64_t kPieceBytes = int64_t{16} << 20;
// Bytes the other candidates read between two reads of the same piece, so every read streams
// from memory as in decode: four times the 32 MiB L3 of the EPYCs measured (at twice, the reads
// ran at 27-32 GB/s against a plain read's 22: partly from the L3).
constexpr int64_t kReuseBytes = int64_t{128} << 20;
// In the cache key: a result timed by an earlier method (whole sweeps, fastest sweep kept) is
// not taken as this one's.
constexpr const char* kTimingMethod = "interleaved by weight, 128 MiB apart";

std::vector<SmallMSettings> candidate_settings() {
  std::vector<SmallMSettings> out;
  for (int rows : {1, 2, 3, 4})
    for (int64_t pf : {int64_t{0}, int64_t{8192}, int64_t{16384}}) out.push_back({rows, pf});
  return out;
}

// v filled with values in [-0.5, 0.5) from a seed (an LCG: the same data on every machine).
void fill_uniform(std::vector<float>& v, uint32_t s) {
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown cpu";
}

// y[1, rows] = x · w[row0 : row0 + rows]^T for one weight, through the built-in small-M kernel.
void gemv(const TuneWeight& t, const float* x, float* y, int64_t row0 = 0, int64_t rows = -1) {
  if (rows < 0) rows = t.n;
  if (t.bf16) matmul_nt_small_bf16(1, rows, t.k, x, static_cast<const uint16_t*>(t.w) + row0 * t.k, y, 0.0f);
  else builtin()->matmul_nt(1, rows, t.k, x, static_cast<const float*>(t.w) + row0 * t.k, y, 0.0f);
}

// Rows [row0, row0 + rows) of one weight: a unit of the timing.
struct Piece {
  const TuneWeight* w;
  int64_t row0, rows;
};

// The reference twin for a few rows of one weight.
double reference_row(const TuneWeight& t, const float* x, int64_t row) {
  double s = 0;
  for (int64_t p = 0; p < t.k; ++p) {
    float w;
    if (t.bf16) {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(t.w)[row * t.k + p]) << 16;
      std::memcpy(&w, &bits, 4);
    } else {
      w = static_cast<const float*>(t.w)[row * t.k + p];
    }
    s += double(x[p]) * w;
  }
  return s;
}

std::string settings_name(const SmallMSettings& s) {
  return "1x" + std::to_string(s.m1_rows) + " tiles, prefetch " +
         (s.m1_prefetch_bytes ? std::to_string(s.m1_prefetch_bytes / 1024) + " KiB" : std::string("off"));
}

bool read_cache(const fs::path& file, SmallMTuning* out) {
  std::ifstream in(file);
  if (!in) return false;
  SmallMTuning t;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    SmallMCandidate c;
    if (tag == "chosen") {
      if (!(ls >> t.chosen.m1_rows >> t.chosen.m1_prefetch_bytes)) return false;
    } else if (tag == "candidate") {
      if (!(ls >> c.settings.m1_rows >> c.settings.m1_prefetch_bytes >> c.gb_s)) return false;
      t.candidates.push_back(c);
    }
  }
  if (t.candidates.empty() || t.chosen.m1_rows < 1 || t.chosen.m1_rows > 4 || t.chosen.m1_prefetch_bytes < 0)
    return false;
  t.source = "cached in " + file.string();
  *out = std::move(t);
  return true;
}

void write_cache(const fs::path& file, const SmallMTuning& t) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return;  // a cache that cannot be written costs the next start 0.2 s, nothing else
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << "chosen " << t.chosen.m1_rows << " " << t.chosen.m1_prefetch_bytes << "\n";
    for (const auto& c : t.candidates)
      if (c.rejected.empty())
        out << "candidate " << c.settings.m1_rows << " " << c.settings.m1_prefetch_bytes << " " << c.gb_s << "\n";
    if (!out) return;
  }
  fs::rename(tmp, file, ec);  // atomic: ranks starting together read a whole file or none
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::string SmallMTuning::describe() const {
  std::ostringstream os;
  os << "small-M kernel at m = 1: " << settings_name(chosen) << " (" << source;
  if (seconds > 0) os << " in " << static_cast<int>(seconds * 1000 + 0.5) << " ms";
  if (passes > 0) os << ": " << passes << (passes == 1 ? " pass" : " passes") << " over " << pieces << " pieces";
  os << "); m = 1 GB/s:";
  for (const auto& c : candidates) {
    os << " " << c.settings.m1_rows << "/" << c.settings.m1_prefetch_bytes / 1024 << "K ";
    if (!c.rejected.empty()) os << "rejected (" << c.rejected << ")";
    else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", c.gb_s);
      os << buf;
    }
  }
  return os.str();
}

std::string small_m_cache_key(const std::vector<TuneWeight>& weights) {
  std::ostringstream key;
  key << cpu_model_name() << "|" << detect_isa().describe() << "|threads " << kernel_threads() << "|" << kTimingMethod;
  std::vector<std::string> shapes;
  for (const auto& w : weights)
    shapes.push_back(std::to_string(w.n) + "x" + std::to_string(w.k) + (w.bf16 ? "b" : "f"));
  std::sort(shapes.begin(), shapes.end());
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  for (const auto& s : shapes) key << "|" << s;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(key.str()));
  return hex;
}

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

int interleaved_choice(const std::vector<std::vector<double>>& step_times, std::vector<double>* seconds) {
  const size_t n = step_times.empty() ? 0 : step_times.front().size();
  std::vector<double> total(n, 0.0);
  for (const auto& step : step_times) {
    DZ_CHECK(step.size() == n, "interleaved_choice: a step with " << step.size() << " of " << n << " candidates");
    const double cap = 2 * median(step);
    for (size_t u = 0; u < n; ++u) total[u] += std::min(step[u], cap);
  }
  if (seconds) *seconds = total;
  int chosen = -1;
  for (size_t u = 0; u < n; ++u)
    if (chosen < 0 || total[u] < total[static_cast<size_t>(chosen)]) chosen = static_cast<int>(u);
  return chosen;
}

SmallMTuning tune_small_m(const std::vector<TuneWeight>& weights, const std::string& cache_dir, double budget_s) {
  SmallMTuning t;
  if (weights.empty()) {
    t.chosen = small_m_settings();
    t.source = "no weights to measure; default";
    return t;
  }
  const fs::path cache =
      cache_dir.empty() ? fs::path() : fs::path(cache_dir) / ("gemm-small-m-" + small_m_cache_key(weights) + ".txt");
  if (!cache.empty() && read_cache(cache, &t)) {
    set_small_m_settings(t.chosen);
    return t;
  }
  const int64_t t0 = monotonic_ns();
  const SmallMSettings before = small_m_settings();
  int64_t k_max = 0, n_max = 0;
  for (const auto& w : weights) k_max = std::max(k_max, w.k), n_max = std::max(n_max, w.n);
  std::vector<float> x(static_cast<size_t>(k_max)), y(static_cast<size_t>(n_max)), y0(static_cast<size_t>(n_max));
  fill_uniform(x, 12345);
  // Correctness first, on the first weight: the default setting against the reference twin on
  // its first rows, and every candidate against the default bit for bit.
  const TuneWeight& first = weights.front();
  set_small_m_settings(SmallMSettings{});
  gemv(first, x.data(), y0.data());
  std::string default_wrong;
  for (int64_t r = 0; r < std::min<int64_t>(first.n, 8); ++r) {
    const double want = reference_row(first, x.data(), r);
    if (std::fabs(y0[r] - want) > 1e-4 * (1 + std::fabs(want))) default_wrong = "row " + std::to_string(r);
  }
  for (const SmallMSettings& c : candidate_settings()) {
    SmallMCandidate cand{c, 0, ""};
    set_small_m_settings(c);
    gemv(first, x.data(), y.data());
    if (!default_wrong.empty()) cand.rejected = "default setting wrong at " + default_wrong;
    else if (std::memcmp(y.data(), y0.data(), static_cast<size_t>(first.n) * 4) != 0) cand.rejected = "bits differ";
    t.candidates.push_back(cand);
  }
  std::vector<size_t> timed;
  for (size_t i = 0; i < t.candidates.size(); ++i)
    if (t.candidates[i].rejected.empty()) timed.push_back(i);
  const int64_t n_timed = static_cast<int64_t>(timed.size());
  // The pieces, from the first weight on, enough that the n_timed pieces read at one step are
  // distinct and a piece comes back (to the next candidate) only after kReuseBytes of others:
  // `stride` steps of n_timed pieces apart.
  auto stride_for = [&](int64_t piece_bytes) {
    const int64_t step_bytes = std::max<int64_t>(1, piece_bytes * std::max<int64_t>(1, n_timed));
    return std::max<int64_t>(1, (kReuseBytes + step_bytes - 1) / step_bytes);
  };
  std::vector<Piece> pieces;
  int64_t bytes = 0;
  auto covered = [&] {
    const int64_t n = static_cast<int64_t>(pieces.size());
    return n > 0 && n >= std::max<int64_t>(1, n_timed) * stride_for(bytes / n);
  };
  for (const auto& w : weights) {
    const int64_t row_bytes = w.k * (w.bf16 ? 2 : 4);
    const int64_t rows = std::clamp<int64_t>(kPieceBytes / std::max<int64_t>(1, row_bytes), 1, w.n);
    for (int64_t r = 0; r < w.n && !covered(); r += rows) {
      pieces.push_back({&w, r, std::min(rows, w.n - r)});
      bytes += pieces.back().rows * row_bytes;
    }
    if (covered()) break;
  }
  const int64_t n_pieces = static_cast<int64_t>(pieces.size());
  // Fewer weights than that (a model the last-level cache holds, in decode too): the candidates
  // as far apart as the pieces allow.
  const int64_t stride =
      covered() ? stride_for(bytes / n_pieces) : std::max<int64_t>(1, n_pieces / std::max<int64_t>(1, n_timed));
  // Passes: at step i every candidate reads one piece (candidate u the piece u * stride after
  // i, in an order that rotates with i), so over a pass each reads every piece once and all of
  // them read at the same moments. One pass, then more while one more ends within the budget.
  std::vector<std::vector<double>> step_times;  // [step][u]
  int passes = 0;
  for (int64_t pass_ns = 0; !timed.empty();) {
    const int64_t p0 = monotonic_ns();
    if (passes > 0 && static_cast<double>(p0 + pass_ns - t0) * 1e-9 > budget_s) break;
    for (int64_t i = 0; i < n_pieces; ++i) {
      std::vector<double> step(timed.size());
      for (int64_t v = 0; v < n_timed; ++v) {
        const int64_t u = (v + i) % n_timed;
        const Piece& pc = pieces[static_cast<size_t>((i + u * stride) % n_pieces)];
        set_small_m_settings(t.candidates[timed[static_cast<size_t>(u)]].settings);
        const int64_t s0 = monotonic_ns();
        gemv(*pc.w, x.data(), y.data(), pc.row0, pc.rows);
        step[static_cast<size_t>(u)] = static_cast<double>(monotonic_ns() - s0) * 1e-9;
      }
      step_times.push_back(std::move(step));
    }
    ++passes;
    pass_ns = monotonic_ns() - p0;
  }
  std::vector<double> seconds;
  const int u_chosen = interleaved_choice(step_times, &seconds);
  const int chosen = u_chosen < 0 ? -1 : static_cast<int>(timed[static_cast<size_t>(u_chosen)]);
  for (size_t u = 0; u < timed.size(); ++u)
    t.candidates[timed[u]].gb_s = static_cast<double>(bytes) * passes / seconds[u] * 1e-9;
  t.passes = passes;
  t.pieces = static_cast<int>(n_pieces);
  t.chosen = chosen < 0 ? before : t.candidates[static_cast<size_t>(chosen)].settings;
  set_small_m_settings(t.chosen);
  t.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  t.source = chosen < 0 ? "every candidate rejected; default kept" : "measured";
  if (chosen >= 0 && !cache.empty()) write_cache(cache, t);
  return t;
}

namespace {

// The small-M key's CPU, ISA, thread count and shapes, the rows timed and the rule's path.
// The libraries' versions are not in it (learning them loads every library at every start):
// after an upgrade, delete the file to time again; a cached path is still verified before use.
std::string large_m_cache_key(const std::vector<TuneWeight>& weights) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx",
                std::hash<std::string>{}(small_m_cache_key(weights) + "|m " + std::to_string(kLargeMRows) + "|rule " +
                                         large_m_rule_id()));
  return hex;
}

bool read_large_cache(const fs::path& file, LargeMTuning* out) {
  std::ifstream in(file);
  if (!in) return false;
  LargeMTuning t;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    LargeMCandidate c;
    if (tag == "chosen") {
      if (!(ls >> t.chosen)) return false;
    } else if (tag == "candidate") {
      if (!(ls >> c.id >> c.gflop_s)) return false;
      t.candidates.push_back(c);
    }
  }
  if (t.candidates.empty() || t.chosen.empty()) return false;
  t.source = "cached in " + file.string();
  *out = std::move(t);
  return true;
}

// Writes `t` as `file` unless the file exists (link(2) does not replace): the first writer's
// choice stands for every process.
void write_large_cache_once(const fs::path& file, const LargeMTuning& t) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return;
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << "chosen " << t.chosen << "\n";
    for (const auto& c : t.candidates) out << "candidate " << c.id << " " << c.gflop_s << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  (void)::link(tmp.c_str(), file.c_str());
  fs::remove(tmp, ec);
}

}  // namespace

std::string LargeMTuning::describe() const {
  std::ostringstream os;
  os << "large-M path " << (chosen.empty() ? rule : chosen) << " (" << source;
  if (seconds > 0) os << " in " << static_cast<int>(seconds * 1000 + 0.5) << " ms";
  if (!rule.empty()) os << "; rule " << rule;
  os << ")";
  if (!candidates.empty()) {
    os << "; m = " << kLargeMRows << " GFLOP/s:";
    for (const auto& c : candidates) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", c.gflop_s);
      os << " " << c.id << " " << buf;
    }
  }
  return os.str();
}

LargeMTuning tune_large_m(const std::vector<TuneWeight>& weights, const std::string& cache_dir, double budget_s) {
  LargeMTuning t;
  t.rule = large_m_rule_id();
  if (t.rule.empty()) {
    t.source = "one path runs every M (DAYZERO_GEMM)";
    return t;
  }
  if (large_m_path_pinned()) {
    t.chosen = large_m_path_id();
    t.source = "pinned by DAYZERO_GEMM_LARGE_M";
    return t;
  }
  if (weights.empty()) {
    t.source = "no weights to measure; rule kept";
    return t;
  }
  std::string why;
  const fs::path cache =
      cache_dir.empty() ? fs::path() : fs::path(cache_dir) / ("gemm-large-m-" + large_m_cache_key(weights) + ".txt");
  // A cached choice loads and verifies only its own path.
  if (!cache.empty() && read_large_cache(cache, &t) && set_large_m_path(t.chosen, "timed at start-up, cached", &why)) {
    t.rule = large_m_rule_id();
    return t;
  }
  t = LargeMTuning{};
  t.rule = large_m_rule_id();
  std::vector<std::string> notes;
  const std::vector<LargeMPath> paths = large_m_paths(&notes);
  const int64_t t0 = monotonic_ns();
  // The distinct shapes, each capped at 16 MiB of f32 rows (a prefill product's time is the
  // path's, whatever the weights hold; a 180 MB weight need not be copied to learn it).
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto& w : weights) {
    const int64_t n = std::min<int64_t>(w.n, std::max<int64_t>(16, (int64_t{16} << 20) / (4 * w.k)));
    if (std::find(shapes.begin(), shapes.end(), std::make_pair(n, w.k)) == shapes.end()) shapes.push_back({n, w.k});
  }
  int64_t max_wk = 0, max_k = 0, max_n = 0;
  double flop = 0;
  for (const auto& [n, k] : shapes) {
    max_wk = std::max(max_wk, n * k), max_k = std::max(max_k, k), max_n = std::max(max_n, n);
    flop += 2.0 * static_cast<double>(kLargeMRows * n * k);
  }
  std::vector<float> w(static_cast<size_t>(max_wk)), x(static_cast<size_t>(kLargeMRows * max_k)),
      y(static_cast<size_t>(kLargeMRows * max_n));
  fill_uniform(w, 777);
  fill_uniform(x, 778);
  std::vector<double> best(paths.size(), 1e30);
  bool spent = false;
  for (int round = 0; !spent; ++round) {
    for (size_t i = 0; i < paths.size() && !spent; ++i) {
      const int64_t s0 = monotonic_ns();
      for (const auto& [n, k] : shapes) paths[i].path->matmul_nt(kLargeMRows, n, k, x.data(), w.data(), y.data(), 0.0f);
      const int64_t s1 = monotonic_ns();
      best[i] = std::min(best[i], static_cast<double>(s1 - s0) * 1e-9);
      spent = round >= 1 && static_cast<double>(s1 - t0) * 1e-9 >= budget_s;
    }
  }
  size_t fastest = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    t.candidates.push_back({paths[i].id, flop / best[i] * 1e-9});
    if (best[i] < best[fastest]) fastest = i;
  }
  // paths[0] is the rule's: another replaces it only by the margin.
  t.chosen = best[0] <= best[fastest] * kLargeMSwitchMargin ? paths[0].id : paths[fastest].id;
  t.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  t.source = "measured";
  if (!cache.empty()) {
    write_large_cache_once(cache, t);
    LargeMTuning stored;
    // Another process chose first: one choice for all that share the cache.
    if (read_large_cache(cache, &stored) && stored.chosen != t.chosen &&
        set_large_m_path(stored.chosen, "timed at start-up by another process", &why)) {
      t.chosen = stored.chosen;
      t.source = "measured; " + stored.source + " by another process, taken";
    }
  }
  if (large_m_path_id() != t.chosen && !set_large_m_path(t.chosen, "timed at start-up", &why)) t.source += "; " + why;
  for (const auto& n : notes) t.source += "; " + n;
  return t;
}

}  // namespace dayzero::kernels::cpu::gemm
