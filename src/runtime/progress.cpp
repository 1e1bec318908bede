// Aggregated progress from the heartbeat files.
#include "runtime/progress.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "core/clock.h"
#include "dump/heartbeat.h"
#include "dump/run_folder.h"

namespace dayzero::runtime {
namespace {
constexpr int64_t kLogEveryNs = 5'000'000'000;  // one line per 5 s when not on a terminal
}

ProgressReporter::ProgressReporter(std::string run_dir, int world_size, std::string label)
    : run_dir_(std::move(run_dir)), label_(std::move(label)), world_size_(world_size),
      tty_(isatty(STDERR_FILENO) != 0), t0_ns_(monotonic_ns()), thread_([this] { run(); }) {}

ProgressReporter::~ProgressReporter() {
  stop_ = true;
  thread_.join();
  if (printed_ && tty_) std::fprintf(stderr, "\n");
}

void ProgressReporter::run() {
  while (!stop_) {
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!stop_) report(false);
  }
}

bool ProgressReporter::report(bool final_line) {
  int64_t done = 0, total = 0;
  int seen = 0;
  for (int r = 0; r < world_size_; ++r) {
    // Another process's file, read while it is rewritten: anything unusable is skipped.
    auto hb = dump::read_heartbeat(dump::heartbeat_path(run_dir_, r));
    if (!hb.ok() || hb->progress_total < 0 || hb->progress_done < 0) continue;
    done += hb->progress_done;
    total += hb->progress_total;
    ++seen;
  }
  if (total <= 0) return false;
  const int64_t now = monotonic_ns();
  if (!tty_ && !final_line && now - last_print_ns_ < kLogEveryNs) return true;
  last_print_ns_ = now;
  printed_ = true;
  const double secs = static_cast<double>(now - t0_ns_) * 1e-9;
  const double gbs = secs > 0 ? static_cast<double>(done) / secs * 1e-9 : 0.0;
  const double eta = gbs > 0 ? static_cast<double>(total - done) * 1e-9 / gbs : 0.0;
  std::fprintf(stderr, "%s[%s] %5.1f%% %.2f of %.2f GB, %.2f GB/s, ETA %.0f s (%d/%d ranks reporting)%s",
               tty_ ? "\r" : "", label_.c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total),
               static_cast<double>(done) * 1e-9, static_cast<double>(total) * 1e-9, gbs, eta, seen, world_size_,
               tty_ && !final_line ? "" : "\n");
  std::fflush(stderr);
  return true;
}

}  // namespace dayzero::runtime
