// The model a bench runs on: a seeded model (a llama, or any make-model options) made into a
// folder once (kept for later runs of the bench), opened through the one model-folder path, and
// a CPU backend with a thread count.
// Shared by the benches; not a test fixture (tests make their models through make-model).
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/model_folder.h"
#include "tools/make_model.h"

namespace dayzero::bench {

struct BenchModel {
  model::ModelFolder info;
  std::unique_ptr<backend::Backend> be;
};

// Makes the model of `o` into o.out_dir unless that folder already holds a config.json, and opens
// it. On failure prints the reason and sets *exit_code (2 bad input, 3 otherwise).
inline std::optional<model::ModelFolder> open_or_make_folder(const tools::MakeModelOptions& o, int* exit_code) {
  if (!std::filesystem::exists(std::filesystem::path(o.out_dir) / "config.json")) {
    if (auto s = tools::make_model(o); !s.ok()) {
      std::fprintf(stderr, "make-model: %s\n", s.message().c_str());
      *exit_code = 3;
      return std::nullopt;
    }
  }
  auto info = model::open_model_folder(o.out_dir, model::WeightsNeeded::kRequired);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", info.status().message().c_str());
    *exit_code = 2;
    return std::nullopt;
  }
  return std::move(info).value();
}

// Makes a llama of `shape` in `dtype` over `shards` files into dir unless dir already holds a
// config.json, opens it and creates the backend (keep_stored: one that keeps bf16 weights). On failure prints the reason and returns
// the exit code the bench should return (2 bad input, 3 otherwise) in *exit_code.
inline std::optional<BenchModel> open_bench_model(const std::string& dir, const model::ModelShape& shape, DType dtype,
                                                  int shards, int threads, int* exit_code,
                                                  bool keep_stored = false) {
  tools::MakeModelOptions o;
  o.family = "llama";
  o.out_dir = dir;
  o.shape = shape;
  o.dtype = dtype;
  o.shards = shards;
  auto info = open_or_make_folder(o, exit_code);
  if (!info) return std::nullopt;
  backend::BackendOptions bo;
  bo.threads = threads;
  bo.cpu_keeps_stored = keep_stored;  // 16-bit weights kept as stored (load with WeightsOnDevice::kAsStored)
  auto be = backend::make_backend(bo);
  if (!be.ok()) {
    std::fprintf(stderr, "%s\n", be.status().message().c_str());
    *exit_code = 3;
    return std::nullopt;
  }
  return BenchModel{std::move(info).value(), std::move(be).value()};
}

}  // namespace dayzero::bench
