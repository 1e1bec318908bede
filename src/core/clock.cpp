// Time formatting and process memory figures.
#include "core/clock.h"

#include <sys/resource.h>

namespace dayzero {
namespace {
std::string fmt_utc(int64_t ns, const char* fmt) {
  const time_t s = static_cast<time_t>(ns / 1000000000LL);
  tm t{};
  gmtime_r(&s, &t);
  char buf[64];
  strftime(buf, sizeof buf, fmt, &t);
  return buf;
}
}  // namespace

std::string utc_iso8601(int64_t ns) { return fmt_utc(ns, "%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_stamp(int64_t ns) { return fmt_utc(ns, "%Y%m%d-%H%M%S"); }

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace dayzero
