// What a model is, from its adapter's tensor specs alone (no weights needed): parameters by
// component, the total and the parameters one token activates, dtypes and quantization, and
// the features the model needs with whether dayzero supports each. Not the tensor check
// (runtime/model_loader.h) and not a memory plan (plan/).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "model/hparams.h"
#include "model/tensor_spec.h"

namespace dayzero::model {

// Parameters per component; an FP8 block scale is never a parameter.
struct ComponentParams {
  int64_t embedding = 0, attention = 0, dense_mlp = 0, routed_experts = 0, shared_experts = 0, router = 0,
          norms = 0, lm_head = 0, vision = 0, projector = 0, mtp_head = 0, other = 0;
  int64_t total() const {
    return embedding + attention + dense_mlp + routed_experts + shared_experts + router + norms + lm_head + vision + projector +
           mtp_head + other;
  }
};

enum class Support { kYes, kNo, kSkipped };  // kSkipped: declared and checked, never run
const char* support_name(Support s);

struct Feature {
  std::string name;    // "GQA", "MLA", "RoPE scaling", ...
  std::string detail;  // "64 q / 8 kv heads", "yarn x40", ...
  Support support = Support::kYes;
};

struct DTypeCount {  // storage of one dtype: every tensor, scales and MTP layers included
  int64_t tensors = 0, elements = 0;
  uint64_t bytes = 0;
};

// The counter of c that parameters of component k add to (kUnknown and kQuantScale: other).
int64_t& component_slot(ComponentParams& c, Component k);

// 671026419712 -> "671,026,419,712" and -> "671.03B": how counts are printed.
std::string grouped_count(int64_t v);
std::string human_count(double v);

struct ParamReport {
  ComponentParams main;  // the decoder layers [0, n_layer), embedding, final norm, lm_head
  ComponentParams mtp;   // multi-token-prediction layers (index >= n_layer): not in total
  int64_t total = 0;     // main.total()
  int64_t mtp_total = 0;
  // Per text token: every parameter of the text model but the routed experts (embedding and
  // lm_head included), plus n_expert_used / n_expert of each MoE layer's routed experts; not
  // the vision tower and projector (they run once per image) nor MTP layers. Without the input
  // embedding (a row lookup): the embedding is subtracted unless it is tied to the lm_head
  // (then its matrix is used as the head).
  int64_t activated = 0;
  int64_t activated_no_embedding = 0;
  int64_t n_moe_layers = 0;

  // Quantization metadata: FP8 block-scale tensors (weight_scale_inv), counted apart.
  int64_t scale_tensors = 0;
  uint64_t scale_bytes = 0;  // from the checkpoint; else f32 per scale element
  int64_t quantized_params = 0;  // parameters of weights stored quantized (is_stored_weight)

  std::string torch_dtype;         // config.json
  std::string quant_method;        // quantization_config.quant_method ("" when none)
  std::string quant_fmt;           // e4m3 / e5m2
  int64_t quant_block_rows = 0, quant_block_cols = 0;
  // From the checkpoint headers when weights were given ("checkpoint"), else "config".
  std::string dtype_source = "config";
  std::map<std::string, DTypeCount> dtypes;  // dtype name -> tensors, params, bytes
  uint64_t weight_bytes = 0;                 // checkpoint bytes, or the estimate from config

  std::vector<Feature> features;
};

// REQUIRES: specs from the adapter's tensor_specs(hp), config the config.json hp was parsed
// from. catalog (may be null): the checkpoint's headers, for the stored dtypes and bytes.
ParamReport inspect_params(const HParams& hp, const std::vector<TensorSpec>& specs, const nlohmann::json& config,
                           const checkpoint::Catalog* catalog = nullptr);

nlohmann::json to_json(const ParamReport& r);

// The safetensors dtype name a tensor is stored in, from config.json alone (r: the report of
// that config): F32 for an FP8 block scale, F8_E4M3 (F8_E5M2 for fmt e5m2) for a weight that
// has one, else torch_dtype's (BF16 when absent). What inspect counts without weights and what
// make-model --like writes; a torch_dtype that names no safetensors dtype is returned as is.
std::string stored_dtype_name(const TensorSpec& s, const ParamReport& r);

}  // namespace dayzero::model
