// Heartbeat: a thread that rewrites live/rank-00003.json every interval (1 s by default)
// with {rank, t_ns, phase, current, pid, host, beat, stopped}, atomically (temp + rename),
// so a watcher always reads a whole object and can tell a stuck rank (old t_ns) from a
// busy one. Not the event log (event_log.h is the full trail); this is only "now".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace dayzero::dump {

// One beat as a watcher reads it back (another process's file: untrusted).
struct HeartbeatRecord {
  int rank = -1;
  int64_t t_ns = 0;          // CLOCK_REALTIME of the beat, the writer's clock
  std::string phase, current, host;
  int64_t pid = -1;
  bool stopped = false;      // the last beat of a rank that stopped its heartbeat
  int64_t progress_done = -1, progress_total = -1;  // -1 when no progress is set
};

// Reads path through the bounded JSON reader. NotFound when absent; Corrupt when it is not an
// object with an integer t_ns; other fields of the wrong type read as absent. Never throws.
Result<HeartbeatRecord> read_heartbeat(const std::string& path);

class Heartbeat {
 public:
  // Writes the first beat before returning (IoError or NotFound naming the path when it
  // cannot), then starts the thread. REQUIRES: interval > 0.
  static Result<std::unique_ptr<Heartbeat>> start(
      const std::string& path, int rank,
      std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  // Stops the thread (see stop()).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Thread-safe; shown from the next beat on.
  void set_phase(std::string phase);      // "load", "prompt p3 decode", ...
  void set_current(std::string current);  // the innermost open event, free text
  // Work done of a known total in the current phase (bytes loaded, tokens...), as "progress".
  void set_progress(int64_t done, int64_t total);
  // Joins the thread and writes a last beat with "stopped": true. Idempotent.
  void stop();
  // The first write failure of the thread, Ok when none.
  Status status() const;

  const std::string& path() const { return path_; }

 private:
  Heartbeat(std::string path, int rank, std::chrono::milliseconds interval);
  Status write_beat(bool stopped);  // REQUIRES: not concurrent with itself
  void run();

  const std::string path_;
  const int rank_;
  const std::chrono::milliseconds interval_;
  const pid_t pid_;
  std::string host_;
  int64_t beat_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::string phase_;
  std::string current_;
  int64_t progress_done_ = -1, progress_total_ = -1;
  Status status_;
  std::thread thread_;
};

}  // namespace dayzero::dump
