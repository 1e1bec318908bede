// Fuzz target: model.safetensors.index.json through Catalog::open, in a folder that also holds
// two small valid shards (model-00001-of-00002 with tensors a, b; model-00002-of-00002 with c),
// so inputs that name them reach the cross-checks (tensor in its shard, claimed once,
// total_size). Accepted catalogs must list each tensor once, inside the folder.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "checkpoint/catalog.h"
#include "checkpoint/writer.h"
#include "fuzz_util.h"

namespace {

const std::filesystem::path& model_dir() {
  static const std::filesystem::path dir = [] {
    using namespace dayzero;
    const std::filesystem::path d = fuzz::scratch() / "model";
    std::filesystem::create_directories(d);
    checkpoint::SafetensorsWriter w1;
    w1.add("a", DType::kF32, {2}, std::vector<uint8_t>(8, 0));
    w1.add("b", DType::kBF16, {2, 2}, std::vector<uint8_t>(8, 0));
    if (!w1.write((d / "model-00001-of-00002.safetensors").string()).ok()) std::abort();
    checkpoint::SafetensorsWriter w2;
    w2.add("c", DType::kF8_E4M3, {4}, std::vector<uint8_t>(4, 0));
    if (!w2.write((d / "model-00002-of-00002.safetensors").string()).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  const auto& dir = model_dir();
  fuzz::write_bytes(dir / checkpoint::kIndexFileName, data, size);
  auto c = checkpoint::Catalog::open(dir.string());
  if (!c.ok()) return 0;
  uint64_t total = 0;
  for (const auto& t : c->tensors()) {
    if (c->find(t.name) != &t) std::abort();
    total += t.nbytes;
  }
  if (total != c->total_bytes() || c->tensors().size() > 3) std::abort();
  return 0;
}
