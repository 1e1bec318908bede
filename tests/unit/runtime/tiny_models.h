// TinyModels: tiny checkpoints made by tools::make_model in folders of their own under the temp
// directory, opened with their weights (runtime::ModelInfo), and removed when it goes, for the
// load tests that need a real model folder. Not a fixture: a test fixture holds one.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model_loader.h"
#include "tools/make_model.h"

namespace dayzero::test_util {

class TinyModels {
 public:
  // Folders are named dayzero-<tag>-<family>-<pid>-<n>; seed is make_model's for make(family, dtype).
  TinyModels(std::string tag, uint64_t seed) : tag_(std::move(tag)), seed_(seed) {}
  TinyModels(const TinyModels&) = delete;
  TinyModels& operator=(const TinyModels&) = delete;
  ~TinyModels() {
    for (const auto& d : dirs_) std::filesystem::remove_all(d);
  }

  // A tiny model of the family (its defaults) stored in dtype, made with this set's seed.
  runtime::ModelInfo make(const std::string& family, DType dtype) {
    tools::MakeModelOptions o;
    o.family = family;
    o.dtype = dtype;
    o.seed = seed_;
    return make(std::move(o));
  }
  // A model made with o as given (o.out_dir is replaced by a fresh folder). A failure to make or
  // open it fails the calling test.
  runtime::ModelInfo make(tools::MakeModelOptions o) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("dayzero-" + tag_ + "-" + o.family + "-" + std::to_string(getpid()) + "-" +
                                       std::to_string(dirs_.size()));
    dirs_.push_back(dir);
    o.out_dir = dir.string();
    const Status made = tools::make_model(o);
    EXPECT_TRUE(made.ok()) << made.message();
    auto info = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
    EXPECT_TRUE(info.ok()) << info.status().message();
    return std::move(info).value();
  }

 private:
  std::string tag_;
  uint64_t seed_;
  std::vector<std::filesystem::path> dirs_;
};

}  // namespace dayzero::test_util
