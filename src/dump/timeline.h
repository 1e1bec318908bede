// Timeline: this rank's events (load, forward, collectives, dump writes) kept in memory for
// the HDF5 /timeline dataset, each begin and end also appended to an EventLog when one is
// attached, so a killed rank still leaves its trail. Not a profiler (no sampling, no GPU
// timestamps): times are CLOCK_REALTIME at the host calls.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::dump {

class EventLog;

// One row of /timeline. Collectives carry their group ("tp0", "pp", "world") and their
// per-group sequence number; seq is -1 and group empty where neither applies.
struct TimelineEvent {
  int64_t t_begin_ns = 0;  // CLOCK_REALTIME
  int64_t t_end_ns = -1;   // -1 while the event is open (and in a dump written before its end)
  std::string kind;        // "load", "forward", "allreduce", "send", "dump", ...
  std::string name;        // "prompt p0 prefill", "model.layers.7.mlp.down_proj.weight", ...
  std::string group;
  int64_t seq = -1;
  int64_t bytes = 0;
};

// Thread-safe: begin/end may come from several threads. events() is a reference for the
// single-threaded end of a run; snapshot() copies under the lock while others record.
class Timeline {
 public:
  using Handle = int64_t;  // index into events()

  // log may be null (memory only). The log is not owned and must outlive this timeline.
  explicit Timeline(EventLog* log = nullptr) : log_(log) {}
  void attach(EventLog* log);

  // Records the begin (now) and appends a "begin" line to the log.
  Handle begin(std::string kind, std::string name, std::string group = "", int64_t seq = -1,
               int64_t bytes = 0);
  // Records the end (now) and appends an "end" line. REQUIRES: h came from begin() on this
  // timeline and has not been ended.
  void end(Handle h);

  const std::vector<TimelineEvent>& events() const { return events_; }
  std::vector<TimelineEvent> snapshot() const;
  // The last n events (fewer when there are fewer), oldest first, copied under the lock:
  // what a fault report shows without copying a long run's whole timeline.
  std::vector<TimelineEvent> last(size_t n) const;
  // The first event-log write failure, Ok when none: recording never stops for the log, the
  // caller reports this at the next agreement point.
  Status log_status() const;

 private:
  void log_line(const char* ev, int64_t t_ns, const TimelineEvent& e);  // holds mu_

  EventLog* log_ = nullptr;
  mutable std::mutex mu_;
  std::vector<TimelineEvent> events_;
  std::vector<bool> logged_;  // [events_.size()]: its begin went to the log (so its end goes too)
  Status log_status_;
};

// Begins on construction, ends on destruction (or at end(), whichever comes first).
class ScopedEvent {
 public:
  ScopedEvent(Timeline& timeline, std::string kind, std::string name, std::string group = "",
              int64_t seq = -1, int64_t bytes = 0)
      : timeline_(&timeline),
        handle_(timeline.begin(std::move(kind), std::move(name), std::move(group), seq, bytes)) {}
  ~ScopedEvent() { end(); }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;

  void end() {
    if (timeline_ == nullptr) return;
    timeline_->end(handle_);
    timeline_ = nullptr;
  }
  Timeline::Handle handle() const { return handle_; }

 private:
  Timeline* timeline_;
  Timeline::Handle handle_;
};

}  // namespace dayzero::dump
