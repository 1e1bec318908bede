// The committed transformers goldens (tools/make_hf_goldens.py): one safetensors file of
// named float tensors with its metadata (magic, version, the versions that made it). Shared
// by hf_golden_test and llava_golden_test; not the comparison itself.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "e2e_util.h"

namespace dayzero::e2e {

struct Golden {
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, Shape> shape;
  std::map<std::string, std::string> meta;
};

inline Golden read_golden(const fs::path& path) {
  Golden g;
  auto f = checkpoint::SafetensorsFile::open(path.string());
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return g;
  g.meta = f->metadata();
  checkpoint::ByteReader reader;
  for (const auto& info : f->tensors()) {
    std::vector<uint8_t> bytes(info.nbytes);
    EXPECT_TRUE(reader.read(info.file, info.offset, info.nbytes, bytes.data()).ok());
    std::vector<float> v(static_cast<size_t>(shape_numel(info.shape)));
    convert_to_f32(info.dtype, bytes.data(), v.data(), v.size());
    g.t[info.name] = std::move(v);
    g.shape[info.name] = info.shape;
  }
  return g;
}

}  // namespace dayzero::e2e
