// Helpers for checkpoint tests: a self-deleting temp folder, raw safetensors files with
// hand-written headers (for bad inputs), one matrix written in four dtypes (for the loader's
// modes and threads), and status assertions.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/writer.h"
#include "core/dtype.h"
#include "core/status.h"

namespace dayzero::checkpoint::test_util {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dz_ckpt_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file: u64 LE length (header.size() unless given), header text, data bytes.
inline void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
                      uint64_t header_len = UINT64_MAX) {
  if (header_len == UINT64_MAX) header_len = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(header_len >> (8 * i));
  out += header;
  out.append(data_bytes, '\x11');
  write_bytes(path, out);
}

// One [rows, cols] matrix in dir's model.safetensors, opened into catalog: "f32" (values over
// [-100, 150], NaN at [0, 5] and [12, 4], +Inf at the last element, -Inf at [30, 3]: in several
// scan blocks and rows, so that slices see some and miss others), "BF16" and "F16" (the same
// values converted), "f8" (arbitrary F8_E4M3 bytes). stored, when given, gets the BF16 and F16
// tensors' file bytes by name. REQUIRES: rows > 30, cols > 5.
inline void write_four_dtype_matrix(const TempDir& dir, int64_t rows, int64_t cols, Catalog& catalog,
                                    std::map<std::string, std::vector<uint8_t>>* stored = nullptr) {
  std::vector<float> v(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) v[i] = static_cast<float>((i * 7919) % 2003) * 0.125f - 100.0f;
  v[5] = NAN;
  v[cols * 12 + 4] = NAN;
  v[rows * cols - 1] = INFINITY;
  v[cols * 30 + 3] = -INFINITY;
  SafetensorsWriter w;
  w.add("f32", DType::kF32, {rows, cols}, bytes_of(v));
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> b(v.size() * 2);
    convert_from_f32(d, v.data(), b.data(), v.size());
    w.add(dtype_name(d), d, {rows, cols}, b);
    if (stored) (*stored)[dtype_name(d)] = b;
  }
  std::vector<uint8_t> f8(v.size());
  for (size_t i = 0; i < f8.size(); ++i) f8[i] = static_cast<uint8_t>(i * 37);
  w.add("f8", DType::kF8_E4M3, {rows, cols}, f8);
  ASSERT_TRUE(w.write(dir.file("model.safetensors")).ok());
  auto c = Catalog::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  catalog = std::move(c).value();
}

// Asserts a bad-input failure (exit code 2) with the given code whose message holds every part.
inline void expect_bad(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.exit_code(), 2) << s.message();
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

}  // namespace dayzero::checkpoint::test_util
