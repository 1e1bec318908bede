// ProgressLine: the pacing (terminal or log) and the format of a bytes-moved progress line.
#include "core/progress_line.h"

#include <unistd.h>

#include <cstdio>

#include "core/clock.h"

namespace dayzero {
namespace {
constexpr int64_t kLogEveryNs = 5'000'000'000;  // one line per 5 s when not on a terminal
constexpr int64_t kTtyEveryNs = 1'000'000'000;  // rewritten once a second on one
}

ProgressLine::ProgressLine(std::string label)
    : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0), t0_ns_(monotonic_ns()) {}

void ProgressLine::update(int64_t done, int64_t total, int reporting, int world, bool final_line) {
  if (total <= 0) return;
  const int64_t now = monotonic_ns();
  if (!final_line && now - last_print_ns_ < (tty_ ? kTtyEveryNs : kLogEveryNs)) return;
  last_print_ns_ = now;
  printed_ = true;
  const double secs = static_cast<double>(now - t0_ns_) * 1e-9;
  const double gbs = secs > 0 ? static_cast<double>(done) / secs * 1e-9 : 0.0;
  const double eta = gbs > 0 ? static_cast<double>(total - done) * 1e-9 / gbs : 0.0;
  open_ = tty_ && !final_line;
  std::fprintf(stderr, "%s[%s] %5.1f%% %.2f of %.2f GB, %.2f GB/s, ETA %.0f s (%d/%d ranks reporting)%s",
               tty_ ? "\r" : "", label_.c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total),
               static_cast<double>(done) * 1e-9, static_cast<double>(total) * 1e-9, gbs, eta, reporting, world,
               open_ ? "" : "\n");
  std::fflush(stderr);
}

bool ProgressLine::finish() {
  if (open_) std::fprintf(stderr, "\n");
  open_ = false;
  return printed_;
}

}  // namespace dayzero
