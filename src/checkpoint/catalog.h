// Catalog: every tensor of a Hugging Face checkpoint folder, from model.safetensors alone or
// from model.safetensors.index.json and its shards, cross-checked so that each tensor lives in
// exactly one shard and the index and the shards agree. Reads headers only, never tensor bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace dayzero::checkpoint {

inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kSingleFileName = "model.safetensors";

class Catalog {
 public:
  // Opens model_dir. The index wins when both files exist. Errors (all exit code 2):
  // NotFound: neither file; a shard named by the index is missing or a dangling symlink (names
  //   index, shard and a tensor mapped to it); a weight_map tensor is absent from its shard.
  // InvalidArgument: an index entry whose file name is absolute or leaves the folder; a shard
  //   that does not resolve to a regular file (FIFO, device, folder). A shard may be a symlink
  //   to a regular file anywhere (Hugging Face's cache): TensorInfo::resolved records the target.
  // Corrupt: malformed index (nesting deeper than kMaxJsonDepth, a key given twice); a shard
  //   tensor missing from weight_map or present in two shards (names both); metadata.total_size
  //   present and not the sum of the tensors' bytes; any header error of a shard (safetensors.h).
  // parser: as for SafetensorsFile::open, for the index and every header alike.
  static Result<Catalog> open(const std::string& model_dir, HeaderParser parser = HeaderParser::kAuto);

  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const std::vector<std::string>& files() const { return files_; }     // shard paths, sorted
  uint64_t total_bytes() const { return total_bytes_; }                // sum of tensor nbytes
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::string> files_;
  uint64_t total_bytes_ = 0;
};

}  // namespace dayzero::checkpoint
