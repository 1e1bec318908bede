// Fuzz target: one .safetensors file (length, JSON header, data) through SafetensorsFile::open,
// the header parser every load, inspect and verify starts with. Any accepted file must keep
// the contract of safetensors.h: tensors inside the file, sorted, bytes == numel * size. The
// streaming parser and the tree parser must agree on every input: the same verdict, message,
// tensors and metadata.
#include <cstdint>
#include <cstdlib>

#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  const auto path = fuzz::scratch() / "input.safetensors";
  fuzz::write_bytes(path, data, size);
  auto f = checkpoint::SafetensorsFile::open(path.string());
  auto tree = checkpoint::SafetensorsFile::open(path.string(), checkpoint::HeaderParser::kTree);
  if (f.ok() != tree.ok()) std::abort();
  if (!f.ok()) {
    if (f.status().message() != tree.status().message()) std::abort();
    return 0;
  }
  if (f->metadata() != tree->metadata() || f->tensors().size() != tree->tensors().size()) std::abort();
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const auto &a = f->tensors()[i], &b = tree->tensors()[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.offset != b.offset || a.nbytes != b.nbytes)
      std::abort();
  }
  const std::string* previous = nullptr;
  for (const auto& t : f->tensors()) {
    if (t.offset + t.nbytes > f->file_size() || t.offset < 8) std::abort();
    if (t.nbytes != static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype)) std::abort();
    if (previous && !(*previous < t.name)) std::abort();
    if (f->find(t.name) != &t) std::abort();
    previous = &t.name;
  }
  return 0;
}
