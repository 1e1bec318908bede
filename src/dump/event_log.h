// EventLog: the append-only per-rank event file events/rank-00003.jsonl. Each record is
// one JSON object on one line, handed to the kernel with a single write(2) before append()
// returns, so a SIGKILL loses nothing already returned (a power loss may: no fdatasync).
// A begin without its end is where the rank is, or died. One "meta" line near the start
// carries what a reader needs to place the rank (see append_meta). Not the HDF5 /timeline (timeline.h
// keeps that in memory); not a reader (diag/ parses these files).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"

namespace dayzero::dump {

class EventLog {
 public:
  // Opens (creating, appending to an existing file) path. NotFound when the directory is
  // missing, IoError for other open failures. The returned log owns the descriptor.
  static Result<std::unique_ptr<EventLog>> open(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends {"t_ns":t_ns,"ev":ev,"kind":..,"name":..,"group":..,"seq":..,"bytes":..}\n.
  // ev is "begin" or "end"; t_ns is CLOCK_REALTIME nanoseconds (core/clock.h realtime_ns).
  // Thread-safe: lines from concurrent callers never interleave. IoError when the write fails
  // (disk full, descriptor gone); the file then holds only whole earlier lines.
  Status append(int64_t t_ns, std::string_view ev, std::string_view kind, std::string_view name,
                std::string_view group, int64_t seq, int64_t bytes);

  // Appends {"t_ns":t_ns,"ev":"meta", <fields of meta>}\n: facts about the rank that readers
  // need without the HDF5 file (rank, host, coordinates, clock_offset_ns). meta: an object.
  // Thread-safe; errors as append().
  Status append_meta(int64_t t_ns, const nlohmann::ordered_json& meta);

  const std::string& path() const { return path_; }

 private:
  EventLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status write_line(std::string line);  // one write(2) of line + '\n' under mu_

  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace dayzero::dump
