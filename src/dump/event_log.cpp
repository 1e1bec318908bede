// EventLog: one unbuffered write(2) per JSON line, under a mutex.
#include "dump/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace dayzero::dump {

Result<std::unique_ptr<EventLog>> EventLog::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "event log " + path + ": open: " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(msg) : Status::IoError(msg);
  }
  return std::unique_ptr<EventLog>(new EventLog(path, fd));
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventLog::append(int64_t t_ns, std::string_view ev, std::string_view kind,
                        std::string_view name, std::string_view group, int64_t seq, int64_t bytes) {
  // Key order is fixed so a line reads the same in every rank's file.
  nlohmann::ordered_json j;
  j["t_ns"] = t_ns;
  j["ev"] = ev;
  j["kind"] = kind;
  j["name"] = name;
  j["group"] = group;
  j["seq"] = seq;
  j["bytes"] = bytes;
  // Replace invalid UTF-8 rather than throw: a tensor name must never stop the log.
  return write_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Status EventLog::append_meta(int64_t t_ns, const nlohmann::ordered_json& meta) {
  nlohmann::ordered_json j;
  j["t_ns"] = t_ns;
  j["ev"] = "meta";
  if (meta.is_object())
    for (auto it = meta.begin(); it != meta.end(); ++it) j[it.key()] = it.value();
  return write_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Status EventLog::write_line(std::string line) {
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  // O_APPEND makes each write land at the end; loop only for the rare partial write.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("event log " + path_ + ": write: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace dayzero::dump
