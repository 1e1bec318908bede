// One progress line on stderr for a phase that moves bytes (load, verify): rewritten in place on
// a terminal, one line every 5 s in a log file, ended by finish(). Formatting and pacing only:
// the figures come from the caller (heartbeat files, or messages from the other ranks).
#pragma once

#include <cstdint>
#include <string>

namespace dayzero {

class ProgressLine {
 public:
  explicit ProgressLine(std::string label);  // "load", "verify": shown as [label]
  // Shows done of total bytes since construction, `reporting` of `world` ranks counted. Prints
  // only when due (every second on a terminal, every 5 s otherwise) or when final. total <= 0:
  // nothing.
  void update(int64_t done, int64_t total, int reporting, int world, bool final_line = false);
  // Ends a line left open on a terminal; true when any line was printed.
  bool finish();

 private:
  std::string label_;
  bool tty_;
  int64_t t0_ns_, last_print_ns_ = 0;
  bool printed_ = false, open_ = false;
};

}  // namespace dayzero
