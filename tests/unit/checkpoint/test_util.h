// Helpers for checkpoint tests: a self-deleting temp folder, raw safetensors files with
// hand-written headers (for bad inputs), and status assertions.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// Asserts a bad-input failure (exit code 2) with the given code whose message holds every part.
inline void expect_bad(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.exit_code(), 2) << s.message();
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

}  // namespace dayzero::checkpoint::test_util
