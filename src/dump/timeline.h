// Timeline: this rank's events (load, forward, collectives, dump writes). Every event passes
// through a bounded ring of the last N (the flight recorder a fault report writes out); the
// list kept for the HDF5 /timeline dataset holds every event or, when asked, only the phase
// and prompt-level ones, so a long run's memory does not grow per collective. Each begin and
// end is also appended to an EventLog when one is attached, so a killed rank still leaves its
// trail. Not a profiler (no sampling, no GPU timestamps): times are CLOCK_REALTIME at the host calls.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
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

// The last `capacity` events pushed, by push order; an event's end is filled in while it is
// still held. Numbers are given in push order from 0. Not thread-safe (Timeline locks).
class EventRing {
 public:
  // REQUIRES: capacity >= 1.
  explicit EventRing(size_t capacity);

  // Stores e, evicting the oldest when full; returns its number (pushed() before the call).
  int64_t push(TimelineEvent e);
  // Sets the end time of event n; false (nothing changes) when n has been evicted or was never pushed.
  bool set_end(int64_t n, int64_t t_end_ns);
  // The events held, oldest first: the last size() pushed (min(pushed(), capacity()) unless a
  // resize shrank it; a ring grown later fills up again from there).
  std::vector<TimelineEvent> contents() const;
  // Keeps the newest min(size(), capacity) events. REQUIRES: capacity >= 1.
  void set_capacity(size_t capacity);

  size_t capacity() const { return slots_.size(); }
  size_t size() const { return held_; }
  int64_t pushed() const { return pushed_; }  // ever, evicted ones included

 private:
  std::vector<TimelineEvent> slots_;  // [capacity]: event n sits in slots_[n % capacity]
  int64_t pushed_ = 0;
  size_t held_ = 0;  // <= capacity: events pushed_ - held_ .. pushed_ - 1 are held
};

// Which events the /timeline list keeps (the ring and the event log see them all).
enum class TimelineKeep {
  kAll,     // every event
  kPhases,  // only kinds in kPhaseKinds: run phases and per-prompt prefill/decode
};
// The kinds TimelineKeep::kPhases keeps.
inline constexpr std::string_view kPhaseKinds[] = {"phase", "prefill", "decode"};
// The ring's size when nobody set it (watchdog.ring_events' default).
inline constexpr size_t kDefaultRingEvents = 4096;

// Thread-safe: begin/end may come from several threads.
class Timeline {
 public:
  using Handle = int64_t;  // the event's number, in begin order

  // log may be null (memory only). The log is not owned and must outlive this timeline.
  explicit Timeline(EventLog* log = nullptr) : log_(log), ring_(kDefaultRingEvents) {}
  // Events begun before the attach keep their end out of the log too.
  void attach(EventLog* log);
  // What the /timeline list keeps from now on (events already kept stay).
  void set_keep(TimelineKeep keep);
  // Resizes the ring, keeping its newest events. REQUIRES: ring_events >= 1.
  void set_ring_capacity(size_t ring_events);

  // Records the begin (now) and appends a "begin" line to the log.
  Handle begin(std::string kind, std::string name, std::string group = "", int64_t seq = -1,
               int64_t bytes = 0);
  // Records the end (now) and appends an "end" line. REQUIRES: h came from begin() on this
  // timeline and has not been ended.
  void end(Handle h);

  // The events the /timeline list kept, in begin order, copied under the lock.
  std::vector<TimelineEvent> snapshot() const;
  // The ring: the last ring-capacity events, oldest first, copied under the lock, and how
  // many events were ever begun (the difference fell out of the ring). What a fault report shows.
  struct Recent {
    std::vector<TimelineEvent> events;
    int64_t total = 0;
  };
  Recent recent() const;
  // The first event-log write failure, Ok when none: recording never stops for the log, the
  // caller reports this at the next agreement point.
  Status log_status() const;

 private:
  void log_line(const char* ev, int64_t t_ns, const TimelineEvent& e);  // holds mu_

  EventLog* log_ = nullptr;
  mutable std::mutex mu_;
  Handle log_from_ = 0;  // events from this handle on had their begin logged
  TimelineKeep keep_ = TimelineKeep::kAll;
  EventRing ring_;
  std::vector<TimelineEvent> kept_;
  std::vector<Handle> kept_handles_;  // [kept_.size()], ascending: the handle of each kept event
  // Events not kept and not yet ended (a few: the ops in flight), for their end line.
  std::vector<std::pair<Handle, TimelineEvent>> open_;
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
