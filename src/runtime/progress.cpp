// Aggregated progress from the heartbeat files.
#include "runtime/progress.h"

#include <chrono>

#include "dump/heartbeat.h"
#include "dump/run_folder.h"

namespace dayzero::runtime {

ProgressReporter::ProgressReporter(std::string run_dir, int world_size, std::string label)
    : run_dir_(std::move(run_dir)), world_size_(world_size), line_(std::move(label)), thread_([this] { run(); }) {}

ProgressReporter::~ProgressReporter() {
  stop_ = true;
  thread_.join();
  line_.finish();
}

void ProgressReporter::run() {
  while (!stop_) {
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!stop_) report();
  }
}

void ProgressReporter::report() {
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
  line_.update(done, total, seen, world_size_);
}

}  // namespace dayzero::runtime
