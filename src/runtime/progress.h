// Job-wide progress of a phase, shown by rank 0: every second it reads the "progress" of each
// rank's heartbeat file (live/rank-N.json) and prints one aggregated line while the phase runs —
// rewritten in place on a terminal, one line every 5 s in a log file. Reads files only, so no
// rank waits for it; the exact job-wide figures come from a reduction after the phase.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "core/progress_line.h"

namespace dayzero::runtime {

class ProgressReporter {
 public:
  // Starts the reporter thread (rank 0 only). label: "load" ...; unit bytes when bytes is true.
  ProgressReporter(std::string run_dir, int world_size, std::string label);
  ~ProgressReporter();  // ends the line in place; the job-wide summary is the caller's
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

 private:
  void run();
  void report();

  std::string run_dir_;
  int world_size_;
  ProgressLine line_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dayzero::runtime
