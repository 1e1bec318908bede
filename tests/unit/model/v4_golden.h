// The DeepSeek-V4 block tests' shared reading of tests/data/golden/deepseek_v4.safetensors:
// transformers' intermediates of the tiny DeepSeek-V4 (tools/make_hf_goldens.py), every tensor as
// f32 (I32 tables as their values), read once; golden(name) one of them; rel_l2 the tests'
// measure (infinite when the sizes differ, so a wrong shape never passes).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"

namespace dayzero::model::blocks::v4_test {

using Tensors = std::map<std::string, std::vector<float>>;

// Every tensor of a safetensors file as f32.
inline Tensors read_all(const std::string& path) {
  Tensors out;
  auto f = checkpoint::SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return out;
  checkpoint::ByteReader reader;
  for (const auto& info : f->tensors()) {
    std::vector<uint8_t> bytes(info.nbytes);
    EXPECT_TRUE(reader.read(info.file, info.offset, info.nbytes, bytes.data()).ok());
    std::vector<float> v(static_cast<size_t>(shape_numel(info.shape)));
    if (info.dtype == DType::kI32) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(reinterpret_cast<const int32_t*>(bytes.data())[i]);
    } else {
      convert_to_f32(info.dtype, bytes.data(), v.data(), v.size());
    }
    out[info.name] = std::move(v);
  }
  return out;
}

inline const Tensors& golden_tensors() {
  static const Tensors t = read_all(std::string(DAYZERO_SOURCE_DIR) + "/tests/data/golden/deepseek_v4.safetensors");
  return t;
}

inline const std::vector<float>& golden(const std::string& name) {
  const auto it = golden_tensors().find(name);
  EXPECT_NE(it, golden_tensors().end()) << name;
  static const std::vector<float> kEmpty;
  return it == golden_tensors().end() ? kEmpty : it->second;
}

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace dayzero::model::blocks::v4_test
