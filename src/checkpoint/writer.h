// SafetensorsWriter: builds a .safetensors file in memory and writes it in one go (test
// fixtures, tiny models, converted checkpoints), plus the sharded-checkpoint index.json.
// Tensors are laid out sorted by name, as Hugging Face does; the output loads with the Python
// `safetensors` library. Not a streaming writer: every tensor's bytes are held until write().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

class SafetensorsWriter {
 public:
  // bytes: the little-endian on-disk bytes, row-major.
  // REQUIRES: bytes.size() == numel(shape) * dtype_size(dtype); name not added before and not
  // "__metadata__".
  void add(std::string name, DType dtype, Shape shape, std::vector<uint8_t> bytes);
  void set_metadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }
  // Writes path (via path.tmp and a rename). Errors: IoError naming the path.
  Status write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> entries_;  // sorted by name: the on-disk order
  std::map<std::string, std::string> metadata_;
};

// One tensor of a sparse file: its header entry only; its bytes are a hole.
struct HoleTensor {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
};

// Writes a .safetensors file with a complete header (tensors sorted by name, as
// SafetensorsWriter does) whose data section is a filesystem hole: the file has its full size
// (ftruncate) but only the header's blocks on disk, and its tensors read as zeros. A
// real-size layout for inspect, plan and verify without the bytes. Written via path.tmp and a
// rename. REQUIRES: names unique and not "__metadata__". Errors: IoError naming the path.
Status write_sparse_safetensors(const std::string& path, std::vector<HoleTensor> tensors,
                                const std::map<std::string, std::string>& metadata);

// Writes dir/model.safetensors.index.json: {"metadata":{"total_size":N},"weight_map":{...}}.
// weight_map: tensor name -> shard file name relative to dir. Errors: IoError naming the path.
Status write_index(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                   uint64_t total_size);

}  // namespace dayzero::checkpoint
