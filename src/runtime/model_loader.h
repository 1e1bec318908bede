// The check of an opened model folder (model/model_folder.h): every expected tensor (presence,
// shape, dtype) and no unclaimed tensors, all before a byte of weights is read. Then loading:
// every spec read by byte range, converted to f32 and placed on the backend, with one
// WeightRecord per tensor for the dump. Opening the folder is not here.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/load.h"
#include "model/adapter.h"
#include "model/model_folder.h"
#include "backend/backend.h"
#include "plan/memory.h"

namespace dayzero::runtime {

// A model opened with its weights: model::open_model_folder(dir, WeightsNeeded::kRequired).
using ModelInfo = model::ModelFolder;

// Checks the catalog against the specs: every spec present with its shape and a float
// dtype, every checkpoint tensor claimed by a spec.
Status check_tensors(const ModelInfo& m);

// Whether a device can keep every weight as stored (model.weights_on_device: as_stored on CUDA):
// Ok, or Unsupported naming the first weight without a device form as stored, a pack-quantized
// INT4 weight or an FP8 tensor without block scales (both are dequantised on load), in one
// sentence that says to use bfloat16. Block-scaled FP8, FP4, BF16, F16 and F32 weights are keepable.
Status check_keepable_as_stored(const ModelInfo& m);

struct LoadStats {
  uint64_t bytes_read = 0;
  uint64_t tensors = 0;
  double seconds = 0;
};

// The part of a tensor this rank holds: all of it, rows/columns [begin, end) of dim 0/1, several
// row ranges concatenated (rows non-empty: a sectioned split, plan/slicing.h), or none.
struct TensorSlice {
  bool held = true;
  int dim = -1;  // -1: the whole tensor
  int64_t begin = 0, end = 0;
  std::vector<std::pair<int64_t, int64_t>> rows = {};
};
using SliceFn = std::function<TensorSlice(const model::TensorSpec&)>;

// Loads this rank's slice of every spec (all of every spec when slice_of is empty) to the
// backend, reading only the bytes of the slice. on_tensor (optional) is called after each
// tensor with its record: the runner uses it for the timeline and progress. threads: threads
// of the load pipeline, this one included (checkpoint::Loader); 0 = the CPU GEMM thread count
// (kernels::cpu::gemm_info(), set by the backend). Records do not depend on it.
// weights_on_device: what the plan counted for each weight (run config model.weights_on_device);
// each weight is then placed in plan::kept_dtype (Backend::to_device_weight(host, kept)), and a
// quantized weight (model::is_stored_weight: FP8 blocks, INT4 groups, MXFP4, NVFP4) kept as
// stored reaches a backend that keeps_stored() its scheme as its values and covering scales
// (checkpoint::load_stored, Backend::to_device_stored); elsewhere it is dequantised on the host
// (checkpoint::load_stored_dequant_f32). Absent: the backend's own rule (to_device_weight(host)),
// every quantized weight dequantised.
// BF16/F16 tensors reach a backend that wants_stored_dtype() as stored, others as host f32.
Result<LoadStats> load_weights(const ModelInfo& m, backend::Backend& be, model::Weights& weights,
                               std::vector<checkpoint::WeightRecord>& records,
                               const std::function<void(const checkpoint::WeightRecord&)>& on_tensor = {},
                               const SliceFn& slice_of = {},
                               size_t staging_bytes = checkpoint::kDefaultStagingBytes, int threads = 0,
                               std::optional<plan::WeightsOnDevice> weights_on_device = std::nullopt);

}  // namespace dayzero::runtime
