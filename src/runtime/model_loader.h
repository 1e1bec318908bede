// Opening a model folder: config.json -> adapter and hparams, safetensors catalog, and the
// check of every expected tensor (presence, shape, dtype) and of unclaimed tensors, all
// before a byte of weights is read. Then loading: every spec read by byte range, converted
// to f32 and placed on the backend, with one WeightRecord per tensor for the dump.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/load.h"
#include "model/adapter.h"
#include "runtime/backend.h"

namespace dayzero::runtime {

struct ModelInfo {
  std::string dir;
  nlohmann::json config;  // config.json
  const model::Adapter* adapter = nullptr;
  model::HParams hp;
  std::vector<model::TensorSpec> specs;
  checkpoint::Catalog catalog;
};

// Errors name the folder, file and tensor; all are bad input (exit 2).
Result<ModelInfo> open_model(const std::string& dir);

// Checks the catalog against the specs: every spec present with its shape and a float
// dtype, every checkpoint tensor claimed by a spec.
Status check_tensors(const ModelInfo& m);

struct LoadStats {
  uint64_t bytes_read = 0;
  uint64_t tensors = 0;
  double seconds = 0;
};

// The part of a tensor this rank holds: all of it, rows/columns [begin, end) of dim 0/1, or none.
struct TensorSlice {
  bool held = true;
  int dim = -1;  // -1: the whole tensor
  int64_t begin = 0, end = 0;
};
using SliceFn = std::function<TensorSlice(const model::TensorSpec&)>;

// Loads this rank's slice of every spec (all of every spec when slice_of is empty) to the
// backend, reading only the bytes of the slice. on_tensor (optional) is called after each
// tensor with its record: the runner uses it for the timeline and progress. threads: threads
// of the load pipeline, this one included (checkpoint::Loader); 0 = the CPU GEMM thread count
// (kernels::cpu::gemm_info(), set by the backend). Records do not depend on it.
Result<LoadStats> load_weights(const ModelInfo& m, Backend& be, model::Weights& weights,
                               std::vector<checkpoint::WeightRecord>& records,
                               const std::function<void(const checkpoint::WeightRecord&)>& on_tensor = {},
                               const SliceFn& slice_of = {},
                               size_t staging_bytes = checkpoint::kDefaultStagingBytes, int threads = 0);

}  // namespace dayzero::runtime
