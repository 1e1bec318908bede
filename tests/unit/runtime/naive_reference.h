// Helpers of the naive reference tests: their own safetensors reading (F32 only) and the error
// metric. Deliberately shares nothing with the runtime, so a runtime error cannot cancel out.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace dayzero::naive {

using Mat = std::vector<double>;

// Every tensor of an F32 safetensors file: header JSON, then raw little-endian floats.
inline std::map<std::string, Mat> read_f32_safetensors(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const auto j = nlohmann::json::parse(header);
  std::map<std::string, Mat> out;
  for (auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(info["dtype"], "F32") << name;
    const uint64_t b = info["data_offsets"][0], e = info["data_offsets"][1];
    std::vector<float> v((e - b) / 4);
    f.seekg(static_cast<std::streamoff>(8 + n + b));
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(e - b));
    out[name] = Mat(v.begin(), v.end());
  }
  return out;
}

// ||a - b|| / ||b|| over n values.
inline double rel_l2(const float* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace dayzero::naive
