// The plan request from a model and a command's inputs (plan_request.h).
#include "plan/plan_request.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/dtype.h"
#include "model/stored_specs.h"
#include "plan/memory.h"

namespace dayzero::plan {
namespace {

// As stored from config.json alone: torch_dtype, then dtype, then bfloat16 with a note.
Result<WeightSizes> config_dtype(const nlohmann::json& config) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (config.contains(key) && config[key].is_string()) {
      const std::string name = config[key].get<std::string>();
      const int64_t size = torch_dtype_size(name);
      if (size == 0)
        return Status::Unsupported("config.json " + std::string(key) + " '" + name +
                                   "' is not a dtype the planner knows");
      return WeightSizes{size, {}, name + ", as stored per config.json"};
    }
  }
  return WeightSizes{2, {}, "bfloat16, assumed: config.json names no torch_dtype"};
}

}  // namespace

Result<WeightsOnDevice> parse_weights_on_device(const std::string& name, const std::string& what) {
  if (name == "as_stored") return WeightsOnDevice::kAsStored;
  if (name == "bfloat16") return WeightsOnDevice::kBF16;
  if (name == "float32") return WeightsOnDevice::kF32;
  return Status::InvalidArgument(what + " " + name + ": expected as_stored, bfloat16 or float32");
}

int64_t torch_dtype_size(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "float32" || name == "float") return 4;
  if (name == "bfloat16" || name == "float16" || name == "half") return 2;
  if (name.rfind("float8", 0) == 0) return 1;
  return 0;
}

namespace {

bool is_fp4_weight(const model::TensorSpec& s) { return model::is_stored_weight(s) && is_fp4(s.stored.format->scheme); }

Result<WeightSizes> stored_weight_sizes(const model::ModelFolder& m) {
  if (m.has_weights && !m.catalog.tensors().empty()) {
    std::map<DType, uint64_t> bytes;
    for (const auto& t : m.catalog.tensors()) bytes[t.dtype] += t.nbytes;
    const auto most = std::max_element(bytes.begin(), bytes.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    WeightSizes w{static_cast<int64_t>(dtype_size(most->first)), {},
                  std::string(dtype_name(most->first)) + ", as stored; each tensor at its stored size"};
    w.stored_bytes.reserve(m.specs.size());
    for (const auto& s : m.specs) {
      const auto* t = m.catalog.find(s.name);
      // A quantized weight kept as stored is counted by the stored-format table.
      w.stored_bytes.push_back(model::is_stored_weight(s) ? 1
                               : t                        ? static_cast<int64_t>(dtype_size(t->dtype))
                                                          : w.bytes_per_weight);
    }
    const auto fp4 = std::find_if(m.specs.begin(), m.specs.end(), is_fp4_weight);
    if (fp4 != m.specs.end())
      w.label += std::string("; ") + fp4->stored.format->name + " expert weights 0.5 B + a scale byte per " +
                 std::to_string(fp4->stored.block_cols);
    return w;
  }
  DZ_ASSIGN_OR_RETURN(WeightSizes w, config_dtype(m.config));
  const auto is = [&](StoredScheme scheme) {
    return std::any_of(m.specs.begin(), m.specs.end(),
                       [&](const auto& s) { return model::is_stored_weight(s, scheme); });
  };
  const bool quantized = is(StoredScheme::kFp8Block);
  const bool packed = is(StoredScheme::kInt4Group);
  const auto fp4 = std::find_if(m.specs.begin(), m.specs.end(), is_fp4_weight);
  if (quantized || packed || fp4 != m.specs.end()) {
    // torch_dtype then names the unquantized tensors (a float8 one: taken as bfloat16).
    if (w.bytes_per_weight == 1) w.bytes_per_weight = 2;
    w.stored_bytes = stored_bytes_from_config(m.specs, w.bytes_per_weight);
    if (quantized) w.label += "; fp8 Linear weights 1 B + f32 block scales (quantization_config)";
    if (packed) w.label += "; int4 pack-quantized Linear weights 0.5 B + bf16 group scales (quantization_config)";
    if (fp4 != m.specs.end())
      w.label += std::string("; ") + fp4->stored.format->name + " expert weights 0.5 B + a scale byte per " +
                 std::to_string(fp4->stored.block_cols) + " (quantization_config)";
  }
  return w;
}

}  // namespace

Result<WeightSizes> weight_sizes(const model::ModelFolder& m, WeightsOnDevice weights, KeepsQuantized keeps) {
  if (weights == WeightsOnDevice::kBF16) return WeightSizes{2, {}, "bfloat16"};
  if (weights == WeightsOnDevice::kF32) return WeightSizes{4, {}, "float32"};
  DZ_ASSIGN_OR_RETURN(WeightSizes w, stored_weight_sizes(m));
  if (keeps.keeps_all()) return w;
  bool fp8_dequantised = false, int4_dequantised = false, fp4_dequantised = false;
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const model::TensorSpec& s = m.specs[i];
    const checkpoint::TensorInfo* t = m.has_weights ? m.catalog.find(s.name) : nullptr;
    const bool fp8 = t ? t->dtype == DType::kF8_E4M3 || t->dtype == DType::kF8_E5M2
                       : model::is_stored_weight(s, StoredScheme::kFp8Block);
    if (s.component == model::Component::kQuantScale) continue;
    if (!model::is_stored_weight(s) && !fp8) continue;
    // The stored dtype kept_dtype takes: an INT4 weight's group scales' (from config.json alone
    // the format's BF16, as the label says).
    const bool int4 = model::is_stored_weight(s, StoredScheme::kInt4Group);
    const checkpoint::TensorInfo* scale = int4 && m.has_weights ? m.catalog.find(model::stored_scale_name(s)) : nullptr;
    const DType stored = int4 ? (scale ? scale->dtype : DType::kBF16) : t ? t->dtype : DType::kF8_E4M3;
    if (kept_dtype(s, stored, WeightsOnDevice::kAsStored, keeps) != DType::kF32) continue;
    w.stored_bytes.at(i) = 4;
    (is_fp4_weight(s) ? fp4_dequantised : int4 ? int4_dequantised : fp8_dequantised) = true;
  }
  if (fp8_dequantised || int4_dequantised)
    w.label += std::string("; ") + (fp8_dequantised && int4_dequantised ? "fp8/int4" : fp8_dequantised ? "fp8" : "int4") +
               " weights dequantised to float32 on load";
  if (fp4_dequantised) w.label += "; fp4 weights dequantised to float32 on load";
  return w;
}

void fill_request_inputs(const RequestInputs& in, const WeightSizes& w, PlanRequest& req) {
  req.topo = in.topo;
  req.world_size = in.world_size;
  req.dp = in.dp;
  req.pp = in.pp;
  req.tp = in.tp;
  req.ep = in.ep;
  req.etp = in.etp;
  req.bytes_per_weight = w.bytes_per_weight;
  req.stored_bytes = w.stored_bytes;
  req.bytes_per_activation = in.bytes_per_activation;
  req.max_context_tokens = in.context_tokens;
  req.batch = in.batch;
  req.headroom_bytes = in.headroom_bytes;
  req.layers = in.layers;
}

Result<PlanRequest> make_plan_request(const model::ModelFolder& m, const RequestInputs& in, WeightSizes* sizes) {
  DZ_ASSIGN_OR_RETURN(WeightSizes w, weight_sizes(m, in.weights, in.keeps_quantized));
  PlanRequest req;
  req.hp = m.hp;
  req.specs = m.specs;
  req.names = edge_names(*m.adapter, m.hp);
  req.layer_descs = m.layers;
  fill_request_inputs(in, w, req);
  if (sizes) *sizes = std::move(w);
  return req;
}

int resident_batch(int max_batch, int64_t prompts) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_batch, prompts)));
}

}  // namespace dayzero::plan
