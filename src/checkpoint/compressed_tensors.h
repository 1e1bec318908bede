// compressed-tensors' quantization_config, the part its formats share (pack-quantized INT4:
// pack_quantized.h; mxfp4- / nvfp4-pack-quantized FP4: fp4.h): quant_method, the status, one
// config group of Linear weights without activation or KV-cache schemes, the format's name, and
// the ignore list with Python re.match semantics. Each format's parser checks its group's
// weights; this file refuses everything else by key. Not the formats' byte layouts.
#pragma once

#include <nlohmann/json.hpp>

#include <regex>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::checkpoint {

// The Linear modules a quantization_config leaves unquantized.
struct IgnoreList {
  std::vector<std::string> ignore;   // module names, or "re:<regex>" (Python re.match: anchored at the start)
  std::vector<std::regex> patterns;  // the "re:" entries compiled, in order (parsing fills it; else compiled per call)

  // Whether a Linear module named `module` (e.g. "model.layers.1.mlp.experts.0.up_proj") is
  // quantized: targets are Linear layers, so every one the ignore list does not name.
  bool quantizes(const std::string& module) const;
};

// The format a compressed-tensors quantization_config q names: its one config group's, else the
// top level's; "" when neither does.
std::string compressed_tensors_format(const nlohmann::json& q);

// The one config group of a compressed-tensors quantization_config, checked.
struct CompressedTensorsGroup {
  std::string format;                      // compressed_tensors_format
  const nlohmann::json* weights = nullptr;  // the group's "weights" object (inside q)
  std::string weights_key;                 // "<qw>.config_groups.<name>.weights" for messages
  IgnoreList ignore;
};

// Checks quantization_config q (qw names it in messages, e.g. "config.json.quantization_config"):
// quant_method "compressed-tensors", quantization_status compressed (or absent), no
// kv_cache_scheme, exactly one config group targeting ["Linear"] with no input or output
// activations and a weights object (dynamic false, actorder and block_structure null), and an
// ignore list of strings whose "re:" patterns compile.
// Errors name the key and the value: Unsupported for a value dayzero cannot honour,
// InvalidArgument for one of the wrong type or a pattern that does not compile.
Result<CompressedTensorsGroup> parse_compressed_tensors(const nlohmann::json& q, const std::string& qw);

// Unsupported naming `key` (under qw) and its value, with what is supported: "<qw>.<key> <value>
// is not supported (<want>)".
Status unsupported_key(const std::string& qw, const std::string& key, const nlohmann::json& value,
                       const std::string& want);

}  // namespace dayzero::checkpoint
