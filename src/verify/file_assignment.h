// Which files a verify reads and which rank reads each: the folder's shards (the index's
// weight_map, else model.safetensors), their sizes and open errors, the *.safetensors files the
// index does not name, and the deterministic assignment of files to ranks by bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::verify {

struct CheckpointFiles {
  std::vector<std::string> files;                 // relative names, sorted
  std::vector<bool> present;
  std::vector<uint64_t> sizes;
  std::vector<std::string> open_errors;           // present but not a readable regular file
  bool has_index = false;
  std::map<std::string, std::string> weight_map;  // tensor -> file (index only)
  std::vector<std::string> extra_files;           // *.safetensors in the folder the index does not name
};

// The shard files of dir. NotFound when dir is not a folder or has neither model.safetensors
// nor an index; Corrupt for an index without a weight_map object, a non-string entry or an
// empty map; InvalidArgument for an entry that names an absolute path or leaves the folder.
Result<CheckpointFiles> list_checkpoint_files(const std::string& dir);

// The deterministic greedy assignment of files to ranks: files by size descending (name
// ascending on ties, i.e. index order) each go to the rank with the fewest bytes so far
// (lowest rank on ties). sizes in file order; returns the owning rank of each file.
std::vector<int> assign_by_bytes(const std::vector<uint64_t>& sizes, int world_size);

}  // namespace dayzero::verify
