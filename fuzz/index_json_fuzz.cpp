// Fuzz target: model.safetensors.index.json through Catalog::open, in a folder that also holds
// two small valid shards (model-00001-of-00002 with tensors a, b; model-00002-of-00002 with c),
// so inputs that name them reach the cross-checks (tensor in its shard, claimed once,
// total_size). Accepted catalogs must list each tensor once, inside the folder. The streaming
// index parser and the tree parser must agree: the same verdict, message and tensors.
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
  auto tree = checkpoint::Catalog::open(dir.string(), checkpoint::HeaderParser::kTree);
  if (c.ok() != tree.ok()) std::abort();
  if (!c.ok()) {
    if (c.status().message() != tree.status().message()) std::abort();
    return 0;
  }
  if (c->tensors().size() != tree->tensors().size()) std::abort();
  for (size_t i = 0; i < c->tensors().size(); ++i)
    if (c->tensors()[i].name != tree->tensors()[i].name || c->tensors()[i].offset != tree->tensors()[i].offset)
      std::abort();
  uint64_t total = 0;
  for (const auto& t : c->tensors()) {
    if (c->find(t.name) != &t) std::abort();
    total += t.nbytes;
  }
  if (total != c->total_bytes() || c->tensors().size() > 3) std::abort();
  return 0;
}
