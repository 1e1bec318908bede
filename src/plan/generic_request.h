// The plan request of a model no adapter knows, from the family-independent analysis
// (analysis/analysis.h): tensor specs with shard rules derived from the tensor names and the
// real (or estimated) shapes, hparams for the layout checks, the analysis' layer descriptors,
// and caveats for the figures that rest on estimates or on features
// dayzero cannot run. The same PlanRequest the adapters' path gives (plan_request.h), so the
// same planner, report and plan.json. Not a runner: nothing here makes the model run.
#pragma once

#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "core/status.h"
#include "plan/plan_request.h"

namespace dayzero::plan {

// The specs of the analysed tensors, in the analysis' order, with shard rules by part:
// embedding and lm_head vocabulary-split; q/k/v (and their biases) split by whole heads along
// dim 0, o along dim 1; MLA q_b / kv_b by heads, its latent projections replicated; dense MLP
// and shared experts gate/up dim 0, down dim 1; routed experts expert-owned (gate/up split
// along 0, down along 1); linear-attention projections and conv in blocks of
// gcd(key heads, value heads), out_proj along dim 1; the sparse-attention indexer, routers,
// norms, vision tower, projector and unknown tensors replicated; MTP layers and FP8 scale
// tensors declared, never held (skip_load; the scales count with their weight). Vision
// tensors go with the first stage (layer -1). Pack-quantized Linears (compressed-tensors):
// as_stored, weight_packed int32 and weight_scale split as their weight (column blocks scaled
// to packed words / scale groups) and weight_shape held with the weight's expert; converted,
// weight_packed at its logical shape [out, in] and the companions not held.
std::vector<model::TensorSpec> generic_specs(const analysis::Analysis& a, bool as_stored = true);

// HParams the planner reads (sizes for check_tp, activations and the cost model): n_head_kv is
// the full-attention kv heads (n_head for MLA, as blocks/mla), head_dim the widest head,
// n_ff the dense MLP (the routed expert's when there is none).
model::HParams generic_hparams(const analysis::Analysis& a);

// What the cache figures mean and where they rest on estimates or unsupported features, one
// caveat per figure and reason (weights, kv_cache, state, activations).
std::vector<Caveat> generic_caveats(const analysis::Analysis& a, WeightsOnDevice weights);

// The request: generic_specs / generic_hparams / the analysis' layer descriptors
// (analysis::describe_layers, weights counted from the specs) / generic_caveats, the edge names
// of the analysed tensors, stored sizes per tensor (as stored: each tensor's dtype from the
// headers or the analysis' dtype for it; converted: bfloat16 / float32 with scales dropped),
// and the inputs as given. `sizes` (may be null) receives the weight sizes for display.
// Errors: InvalidArgument when the analysis has no decoder layers.
Result<PlanRequest> make_generic_plan_request(const analysis::Analysis& a, const RequestInputs& in,
                                              WeightSizes* sizes = nullptr);

// The whole model's cache at tp = 1 for one sequence, for the model line of `dayzero plan`:
// KV bytes per token of the layers without a window and of the sliding-window layers (which
// stop growing at their window), the compressed entries' bytes per token of context (DeepSeek-V4's
// CSA / HCA layers: one entry per compress_rate tokens, so a fraction per token), and the state
// bytes per sequence (linear attention; apart, the compressors' pending tails).
struct CacheSummary {
  int64_t kv_bytes_per_token = 0;
  int64_t window_kv_bytes_per_token = 0;
  double compressed_kv_bytes_per_token = 0;
  int64_t compressed_layers = 0;
  int64_t pending_bytes_per_sequence = 0;  // the compressors' tails
  int64_t state_bytes_per_sequence = 0;
  int64_t kv_layers = 0, window_layers = 0, state_layers = 0;
};
CacheSummary summarize_cache(const std::vector<model::LayerDesc>& layers, int64_t bytes_per_activation);

}  // namespace dayzero::plan
