// ByteReader: pread loops with errno mapped onto Status codes.
#include "checkpoint/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/file.h"

namespace dayzero::checkpoint {
namespace {

std::string errno_str(int err) { return std::string(std::strerror(err)); }

}  // namespace

ByteReader::~ByteReader() { close_all(); }

ByteReader::ByteReader(ByteReader&& other) noexcept
    : fds_(std::move(other.fds_)), bytes_read_(other.bytes_read_), reads_(other.reads_) {
  other.fds_.clear();
}

ByteReader& ByteReader::operator=(ByteReader&& other) noexcept {
  if (this != &other) {
    close_all();
    fds_ = std::move(other.fds_);
    other.fds_.clear();
    bytes_read_ = other.bytes_read_;
    reads_ = other.reads_;
  }
  return *this;
}

void ByteReader::close_all() {
  for (auto& [path, fd] : fds_) ::close(fd);
  fds_.clear();
}

Result<int> ByteReader::fd_for(const std::string& path) {
  if (auto it = fds_.find(path); it != fds_.end()) return it->second;
  DZ_ASSIGN_OR_RETURN(const RegularFile file, open_regular_file(path));
  const int fd = file.fd;
  fds_.emplace(path, fd);
  return fd;
}

Result<uint64_t> ByteReader::file_size(const std::string& path) {
  DZ_ASSIGN_OR_RETURN(int fd, fd_for(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IoError(path + ": fstat failed: " + errno_str(errno));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Status ByteReader::read(const std::string& path, uint64_t offset, uint64_t len, void* dst) {
  if (offset + len < offset) {
    return Status::InvalidArgument(path + ": byte range at " + std::to_string(offset) + " of length " +
                                   std::to_string(len) + " overflows");
  }
  DZ_ASSIGN_OR_RETURN(int fd, fd_for(path));
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, out + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": pread of bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + len) + ") failed: " + errno_str(errno));
    }
    if (n == 0) {
      return Status::Corrupt(path + ": end of file at byte " + std::to_string(offset + done) +
                             " while reading bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + len) + ") (truncated?)");
    }
    done += static_cast<uint64_t>(n);
  }
  bytes_read_ += len;
  ++reads_;
  return Status::Ok();
}

}  // namespace dayzero::checkpoint
