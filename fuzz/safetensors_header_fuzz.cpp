// Fuzz target: one .safetensors file (length, JSON header, data) through SafetensorsFile::open,
// the header parser every load, inspect and verify starts with. Any accepted file must keep
// the contract of safetensors.h: tensors inside the file, sorted, bytes == numel * size.
#include <cstdint>
#include <cstdlib>

#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  const auto path = fuzz::scratch() / "input.safetensors";
  fuzz::write_bytes(path, data, size);
  auto f = checkpoint::SafetensorsFile::open(path.string());
  if (!f.ok()) return 0;
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
