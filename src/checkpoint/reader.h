// ByteReader: exact byte-range reads from checkpoint files with pread, one cached file
// descriptor per path, and counters of what was read (to report read amplification).
// Not thread-safe, and never maps files: every byte that reaches memory is counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"

namespace dayzero::checkpoint {

class ByteReader {
 public:
  ByteReader() = default;
  ~ByteReader();  // closes every cached descriptor
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;
  ByteReader(ByteReader&& other) noexcept;
  ByteReader& operator=(ByteReader&& other) noexcept;

  // Reads exactly len bytes at offset of the file at path into dst (len bytes, caller-owned).
  // Errors: NotFound (no such file), InvalidArgument (not a regular file once symlinks are
  // followed: checked with fstat on a non-blocking open, so a FIFO never blocks), Corrupt (end of file before offset+len; names the file
  // and the range), IoError (any other failure of open/pread). Retries short reads and EINTR.
  Status read(const std::string& path, uint64_t offset, uint64_t len, void* dst);
  // Size of the file in bytes (opens and caches it). Errors as for read().
  Result<uint64_t> file_size(const std::string& path);
  void close_all();

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t reads() const { return reads_; }  // successful read() calls, not syscalls

 private:
  Result<int> fd_for(const std::string& path);

  std::map<std::string, int> fds_;
  uint64_t bytes_read_ = 0;
  uint64_t reads_ = 0;
};

}  // namespace dayzero::checkpoint
