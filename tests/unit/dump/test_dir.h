// A fresh temporary directory per test, removed afterwards (kept when DAYZERO_KEEP_TMP is set,
// to look at the files by hand). Test helper only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace dayzero::dump::testing {

class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() /
             ("dz-dump-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" +
              std::to_string(getpid())))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    if (std::getenv("DAYZERO_KEEP_TMP") == nullptr) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace dayzero::dump::testing
