// Heartbeat: timed rewrites of a small JSON file by temp + rename.
#include "dump/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/clock.h"
#include "core/json.h"

namespace dayzero::dump {

Result<HeartbeatRecord> read_heartbeat(const std::string& path) {
  DZ_ASSIGN_OR_RETURN(const nlohmann::json j, read_json_file(path, {.max_depth = 8}));
  if (!j.is_object() || !j.contains("t_ns") || !j["t_ns"].is_number_integer())
    return Status::Corrupt(path + ": not a heartbeat (an object with an integer t_ns)");
  const auto str = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : ""; };
  const auto num = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_number_integer() ? o[k].get<int64_t>() : int64_t{-1};
  };
  HeartbeatRecord h;
  h.rank = static_cast<int>(num(j, "rank"));
  h.t_ns = j["t_ns"].get<int64_t>();
  h.phase = str("phase");
  h.current = str("current");
  h.host = str("host");
  h.pid = num(j, "pid");
  h.stopped = j.contains("stopped") && j["stopped"].is_boolean() && j["stopped"].get<bool>();
  if (j.contains("progress") && j["progress"].is_object()) {
    h.progress_done = num(j["progress"], "done");
    h.progress_total = num(j["progress"], "total");
  }
  return h;
}
namespace {

// Writes text to path atomically: readers see the old file or the new one, never a part.
Status write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "heartbeat " + tmp + ": open: " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(msg) : Status::IoError(msg);
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string msg = "heartbeat " + tmp + ": write: " + std::strerror(errno);
      ::close(fd);
      return Status::IoError(msg);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return Status::IoError("heartbeat " + tmp + ": close: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IoError("heartbeat " + path + ": rename: " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Heartbeat::Heartbeat(std::string path, int rank, std::chrono::milliseconds interval)
    : path_(std::move(path)),
      rank_(rank),
      interval_(interval),
      pid_(getpid()),
      host_(host_name()) {}

Result<std::unique_ptr<Heartbeat>> Heartbeat::start(const std::string& path, int rank,
                                                    std::chrono::milliseconds interval) {
  DZ_CHECK(interval.count() > 0, "heartbeat interval " << interval.count() << " ms");
  std::unique_ptr<Heartbeat> hb(new Heartbeat(path, rank, interval));
  DZ_RETURN_IF_ERROR(hb->write_beat(false));
  hb->thread_ = std::thread([p = hb.get()] { p->run(); });
  return hb;
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::set_phase(std::string phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(phase);
}

void Heartbeat::set_current(std::string current) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(current);
}

void Heartbeat::set_progress(int64_t done, int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_done_ = done;
  progress_total_ = total;
}

Status Heartbeat::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Status s = write_beat(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok() && status_.ok()) status_ = s;
}

void Heartbeat::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (cv_.wait_for(lock, interval_, [this] { return stopping_; })) break;
    lock.unlock();
    Status s = write_beat(false);
    lock.lock();
    if (!s.ok() && status_.ok()) status_ = s;
  }
}

Status Heartbeat::write_beat(bool stopped) {
  nlohmann::ordered_json j;
  j["rank"] = rank_;
  j["t_ns"] = realtime_ns();
  {
    std::lock_guard<std::mutex> lock(mu_);
    j["phase"] = phase_;
    j["current"] = current_;
    if (progress_total_ >= 0) j["progress"] = {{"done", progress_done_}, {"total", progress_total_}};
  }
  j["pid"] = static_cast<int64_t>(pid_);
  j["host"] = host_;
  j["beat"] = beat_++;
  j["stopped"] = stopped;
  return write_file_atomic(path_,
                           j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace dayzero::dump
