// Opening a file that must be a regular file (a shard, a JSON file of a model folder): the open
// never blocks (a FIFO would wait for a writer forever) and what is not a regular file once
// symlinks are followed is refused before any read. Not a reader: callers read the descriptor.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dayzero {

struct RegularFile {
  int fd = -1;        // owned by the caller, O_RDONLY | O_CLOEXEC
  uint64_t size = 0;  // st_size at open
};

// NotFound when absent; InvalidArgument when not a regular file (a FIFO, device or folder);
// IoError for other open/fstat failures. Messages start with the path.
Result<RegularFile> open_regular_file(const std::string& path);

}  // namespace dayzero
