// The request queue: a mutex, a condition variable and a deque.
#include "serve/request_queue.h"

#include <algorithm>
#include <chrono>

namespace dayzero::serve {

RequestQueue::Push RequestQueue::push(const std::vector<std::shared_ptr<Request>>& rs, size_t max_queue) {
  {
    std::lock_guard lock(mu_);
    if (draining_) return Push::kDraining;
    if (q_.size() + rs.size() > max_queue) return Push::kFull;
    q_.insert(q_.end(), rs.begin(), rs.end());
  }
  cv_.notify_all();
  return Push::kQueued;
}

bool RequestQueue::remove(const std::shared_ptr<Request>& r) {
  std::lock_guard lock(mu_);
  const auto it = std::find(q_.begin(), q_.end(), r);
  if (it == q_.end()) return false;
  q_.erase(it);
  return true;
}

std::vector<std::shared_ptr<Request>> RequestQueue::take(size_t n, int wait_ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return !q_.empty(); });
  std::vector<std::shared_ptr<Request>> out;
  while (!q_.empty() && out.size() < n) {
    out.push_back(std::move(q_.front()));
    q_.pop_front();
  }
  return out;
}

void RequestQueue::start_drain() { draining_ = true; }

size_t RequestQueue::depth() const {
  std::lock_guard lock(mu_);
  return q_.size();
}

std::vector<std::shared_ptr<Request>> RequestQueue::take_all() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Request>> out(q_.begin(), q_.end());
  q_.clear();
  return out;
}

void end_request(Request& r, Fault fault) {
  {
    std::lock_guard lock(r.mu);
    if (r.done) return;
    r.done = true;
    r.fault = fault;
  }
  r.cv.notify_all();
}

}  // namespace dayzero::serve
