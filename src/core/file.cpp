// open_regular_file (file.h).
#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dayzero {

Result<RegularFile> open_regular_file(const std::string& path) {
  int fd;
  do {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it
    // changes nothing for a regular file.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IoError(path + ": open failed: " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(path + ": fstat failed: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file (a FIFO, device or folder is refused)");
  }
  return RegularFile{fd, static_cast<uint64_t>(st.st_size)};
}

}  // namespace dayzero
