// SafetensorsFile: the validated header of one .safetensors file (tensor names, dtypes,
// shapes, absolute byte ranges, __metadata__). The header is untrusted input and is read
// with pread; tensor bytes are not read here (reader.h, load.h) and the file is never mapped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;          // PyTorch order, as stored
  std::string file;     // path of the .safetensors file holding the bytes
  uint64_t offset = 0;  // absolute byte offset in file (8 + header length + data_offsets[0])
  uint64_t nbytes = 0;  // == numel * dtype_size
  // Catalog: the file's real path when it is reached through a symlink (a Hugging Face cache's
  // blobs/), else empty.
  std::string resolved;
};

// Largest header accepted: real headers are well under 10 MiB even for 100k tensors.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Which parser reads the header JSON. kAuto streams a header as writers produce it straight into
// records and hands anything unusual to the tree parser, whose checks give the messages; kTree
// uses only the tree parser (tests and the fuzzer hold the two against each other).
enum class HeaderParser { kAuto, kTree };

class SafetensorsFile {
 public:
  // Reads and validates the header of path. Errors (each names the path, and the tensor
  // where one is involved): NotFound (no file), Corrupt (short file, header length out of
  // bounds, malformed JSON or nesting deeper than kMaxJsonDepth, a tensor name given twice,
  // __metadata__ not a string-to-string object, bad shape/offsets, truncated data, byte count
  // != numel*size, overlapping tensors, a gap between tensors or bytes after the last one: the
  // tensors must cover the data section exactly), Unsupported (unknown dtype), InvalidArgument
  // (not a regular file: a FIFO or device is refused without blocking), IoError (read failure).
  static Result<SafetensorsFile> open(const std::string& path, HeaderParser parser = HeaderParser::kAuto);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent
  std::vector<TensorInfo> release_tensors() { return std::move(tensors_); }  // leaves none
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  bool parsed_fast() const { return parsed_fast_; }  // the streaming path accepted the header

 private:
  std::string path_;
  uint64_t file_size_ = 0;
  bool parsed_fast_ = false;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dayzero::checkpoint
