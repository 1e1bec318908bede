// Timeline: in-memory events mirrored line by line into the event log.
#include "dump/timeline.h"

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "dump/event_log.h"

namespace dayzero::dump {

void Timeline::attach(EventLog* log) {
  std::lock_guard<std::mutex> lock(mu_);
  log_ = log;
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
  events_.push_back(std::move(e));
  // An event begun before the log was attached keeps its end out of the log as well: an end
  // line without its begin would read as a malformed trail.
  logged_.push_back(log_ != nullptr);
  log_line("begin", events_.back().t_begin_ns, events_.back());
  return static_cast<Handle>(events_.size()) - 1;
}

void Timeline::end(Handle h) {
  const int64_t t = realtime_ns();
  std::lock_guard<std::mutex> lock(mu_);
  DZ_CHECK(h >= 0 && h < static_cast<Handle>(events_.size()), "timeline handle " << h);
  TimelineEvent& e = events_[static_cast<size_t>(h)];
  DZ_CHECK(e.t_end_ns < 0, "timeline event ended twice: " << e.kind << " " << e.name);
  e.t_end_ns = t;
  if (logged_[static_cast<size_t>(h)]) log_line("end", t, e);
}

std::vector<TimelineEvent> Timeline::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::vector<TimelineEvent> Timeline::last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t from = events_.size() > n ? events_.size() - n : 0;
  return std::vector<TimelineEvent>(events_.begin() + static_cast<std::ptrdiff_t>(from), events_.end());
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
