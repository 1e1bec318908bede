// Timeline: every event into the ring, the kept ones into the /timeline list, each begin and
// end mirrored line by line into the event log.
#include "dump/timeline.h"

#include <algorithm>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "dump/event_log.h"

namespace dayzero::dump {

EventRing::EventRing(size_t capacity) : slots_(capacity) {
  DZ_CHECK(capacity >= 1, "event ring capacity " << capacity);
}

int64_t EventRing::push(TimelineEvent e) {
  slots_[static_cast<size_t>(pushed_) % slots_.size()] = std::move(e);
  if (held_ < slots_.size()) ++held_;
  return pushed_++;
}

bool EventRing::set_end(int64_t n, int64_t t_end_ns) {
  if (n < 0 || n >= pushed_ || n < pushed_ - static_cast<int64_t>(held_)) return false;
  slots_[static_cast<size_t>(n) % slots_.size()].t_end_ns = t_end_ns;
  return true;
}

std::vector<TimelineEvent> EventRing::contents() const {
  std::vector<TimelineEvent> out;
  out.reserve(size());
  for (int64_t n = pushed_ - static_cast<int64_t>(held_); n < pushed_; ++n)
    out.push_back(slots_[static_cast<size_t>(n) % slots_.size()]);
  return out;
}

void EventRing::set_capacity(size_t capacity) {
  DZ_CHECK(capacity >= 1, "event ring capacity " << capacity);
  std::vector<TimelineEvent> held = contents();
  const size_t keep = std::min(held.size(), capacity);
  slots_.assign(capacity, TimelineEvent{});
  // Event n keeps its number, so it lands in slots_[n % capacity] of the new size.
  for (size_t i = held.size() - keep; i < held.size(); ++i) {
    const int64_t n = pushed_ - static_cast<int64_t>(held.size() - i);
    slots_[static_cast<size_t>(n) % capacity] = std::move(held[i]);
  }
  held_ = keep;
}

void Timeline::attach(EventLog* log) {
  std::lock_guard<std::mutex> lock(mu_);
  log_ = log;
  log_from_ = ring_.pushed();
}

void Timeline::set_keep(TimelineKeep keep) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_ = keep;
}

void Timeline::set_ring_capacity(size_t ring_events) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_.set_capacity(ring_events);
}

Timeline::Handle Timeline::begin(std::string kind, std::string name, std::string group, int64_t seq,
                                 int64_t bytes) {
  TimelineEvent e;
  e.t_begin_ns = realtime_ns();
  e.kind = std::move(kind);
  e.name = std::move(name);
  e.group = std::move(group);
  e.seq = seq;
  e.bytes = bytes;
  std::lock_guard<std::mutex> lock(mu_);
  log_line("begin", e.t_begin_ns, e);
  const bool kept = keep_ == TimelineKeep::kAll ||
                    std::find(std::begin(kPhaseKinds), std::end(kPhaseKinds), e.kind) != std::end(kPhaseKinds);
  const Handle h = ring_.pushed();
  if (kept) {
    kept_.push_back(e);
    kept_handles_.push_back(h);
  } else {
    open_.emplace_back(h, e);
  }
  ring_.push(std::move(e));
  return h;
}

void Timeline::end(Handle h) {
  const int64_t t = realtime_ns();
  std::lock_guard<std::mutex> lock(mu_);
  DZ_CHECK(h >= 0 && h < ring_.pushed(), "timeline handle " << h);
  ring_.set_end(h, t);
  // An event begun before the log was attached keeps its end out of the log as well: an end
  // line without its begin would read as a malformed trail.
  const bool log_end = log_ != nullptr && h >= log_from_;
  const auto it = std::lower_bound(kept_handles_.begin(), kept_handles_.end(), h);
  if (it != kept_handles_.end() && *it == h) {
    TimelineEvent& kept = kept_[static_cast<size_t>(it - kept_handles_.begin())];
    DZ_CHECK(kept.t_end_ns < 0, "timeline event ended twice: " << kept.kind << " " << kept.name);
    kept.t_end_ns = t;
    if (log_end) log_line("end", t, kept);
    return;
  }
  const auto o = std::find_if(open_.begin(), open_.end(), [h](const auto& p) { return p.first == h; });
  DZ_CHECK(o != open_.end(), "timeline event " << h << " ended twice");
  if (log_end) log_line("end", t, o->second);
  open_.erase(o);
}

std::vector<TimelineEvent> Timeline::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

Timeline::Recent Timeline::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Recent{ring_.contents(), ring_.pushed()};
}

Status Timeline::log_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_status_;
}

void Timeline::log_line(const char* ev, int64_t t_ns, const TimelineEvent& e) {
  if (log_ == nullptr) return;
  Status s = log_->append(t_ns, ev, e.kind, e.name, e.group, e.seq, e.bytes);
  if (!s.ok() && log_status_.ok()) {
    DZ_LOG_WARN("{}", s.message());
    log_status_ = s;
  }
}

}  // namespace dayzero::dump
