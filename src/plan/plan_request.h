// Building the planner's request from an opened model and what a command knows (topology,
// fixed sizes, weights-on-device policy, compute dtype, context, batch, headroom): the one
// path by which `dayzero run`, `dayzero plan` and the plan bench ask for a plan, so the same
// inputs give the same plan everywhere. Not the planner itself (planner.h) and not topology
// discovery (the run discovers it over MPI; `plan` reads flags and files).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/model_folder.h"
#include "plan/planner.h"
#include "topology/topology.h"

namespace dayzero::plan {

// WeightsOnDevice (what the memory model counts for a weight) is in plan/memory.h.

// "as_stored" | "bfloat16" | "float32"; InvalidArgument naming `what` (the flag or key) otherwise.
Result<WeightsOnDevice> parse_weights_on_device(const std::string& name, const std::string& what);

struct WeightSizes {
  // Converted: every weight's element size. As stored: the dtype holding the most bytes in the
  // checkpoint (else config.json's torch_dtype), for a spec the checkpoint lacks and for display.
  int64_t bytes_per_weight = 2;
  std::vector<int64_t> stored_bytes;  // PlanRequest::stored_bytes: empty, or one size per spec
  std::string label;                  // "BF16, as stored; each tensor at its stored size"
};

// The weight sizes under a policy. As stored, with weights: each spec at its checkpoint dtype;
// from config.json alone: torch_dtype (or dtype; bfloat16 when neither says) for every spec,
// except that quantized Linears kept as stored (model::is_stored_weight) count by the stored-format
// table: values plus covering scales (stored_bytes_from_config). Unsupported when torch_dtype names no known dtype.
// The quantized weights a backend does not keep (keeps: kept_dtype; the CPU dequantises
// pack-quantized INT4 and FP8 without block scales) count 4 bytes an element as stored, the f32
// they are dequantised to on load.
Result<WeightSizes> weight_sizes(const model::ModelFolder& m, WeightsOnDevice weights, KeepsQuantized keeps = {});

// Element size of a torch dtype name ("bfloat16", "torch.float32", "float8_e4m3fn"); 0 when unknown.
int64_t torch_dtype_size(std::string name);

struct RequestInputs {
  topology::Topology topo;
  int world_size = 0;                      // 0: every rank of the topology
  std::optional<int> dp, pp, tp, ep, etp;  // sizes fixed by the user
  WeightsOnDevice weights = WeightsOnDevice::kAsStored;
  KeepsQuantized keeps_quantized;          // what is dequantised to f32 on load (kept_dtype)
  int64_t bytes_per_activation = 2;        // compute dtype of KV cache and activations (CPU f32: 4)
  int64_t context_tokens = 4096;           // the longest sequence: prompt + reference + new tokens
  int batch = 1;                           // sequences resident at once (each with its KV cache)
  int64_t headroom_bytes = int64_t{1} << 30;
  std::optional<std::pair<int, int>> layers;  // PlanRequest::layers: a replay of decoder layers [first, second)
};

// What every plan request takes from its inputs and weight sizes, whichever path built it
// (the adapter's make_plan_request or the generic analysis's make_generic_plan_request).
void fill_request_inputs(const RequestInputs& in, const WeightSizes& w, PlanRequest& req);

// The request for choose_plan: the model's hparams, specs and edge names, the weight sizes of
// weight_sizes(m, in.weights), and the inputs as given. `sizes` (may be null) receives the
// weight sizes for display. Errors: those of weight_sizes.
Result<PlanRequest> make_plan_request(const model::ModelFolder& m, const RequestInputs& in,
                                      WeightSizes* sizes = nullptr);

// The sequences a run keeps resident at once: min(max_batch, prompts), at least 1.
int resident_batch(int max_batch, int64_t prompts);

}  // namespace dayzero::plan
