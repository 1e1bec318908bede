// Clocks: wall time for event logs (CLOCK_REALTIME, comparable across hosts after the
// measured offset) and a monotonic clock for durations.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace dayzero {

inline int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}
inline int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}
// "2026-11-29T15:04:05Z"
std::string utc_iso8601(int64_t realtime_ns);
// "20261129-150405" for run folder names.
std::string utc_stamp(int64_t realtime_ns);
// Peak resident set size of this process, bytes (from getrusage).
int64_t peak_rss_bytes();

}  // namespace dayzero
