// Opening a model: config.json -> adapter, hparams and tensor specs, plus the safetensors
// catalog (headers only, no weight bytes) when the weights are there. The one way `run`,
// `plan`, `inspect` and the plan bench read a model. Not the tensor check nor the loading
// (runtime/model_loader.h), and not the plan request (plan/plan_request.h).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "core/status.h"
#include "model/adapter.h"
#include "model/hparams.h"
#include "model/tensor_spec.h"

namespace dayzero::model {

enum class WeightsNeeded {
  kRequired,   // `run`: the folder must hold model.safetensors or its index
  kIfPresent,  // `plan`, `inspect`: a bare config.json (or a folder with only config.json) is enough
};

struct ModelFolder {
  std::string dir;          // the model folder; empty when opened from a bare config.json
  std::string config_path;  // the config.json that was read
  nlohmann::json config;
  const Adapter* adapter = nullptr;
  HParams hp;
  std::vector<TensorSpec> specs;  // adapter->tensor_specs(hp)
  std::vector<LayerDesc> layers;  // adapter->layer_kinds(hp), weights counted from specs
  bool has_weights = false;       // catalog read from the folder's safetensors headers
  checkpoint::Catalog catalog;    // empty unless has_weights
};

// True when dir holds model.safetensors or model.safetensors.index.json.
bool has_safetensors(const std::string& dir);

// The one parse of a config.json. Errors: NotFound (cannot open), Corrupt (malformed JSON),
// both naming the file.
Result<nlohmann::json> read_config_json(const std::string& path);

// path: a model folder, or (kIfPresent only) a config.json file. Reads config.json, resolves
// the adapter, parses hparams, lists the specs and, when the folder holds safetensors, opens
// the catalog. Errors name the folder or file (bad input, exit 2): no config.json, malformed
// JSON, unknown family, bad hparams, no weights where kRequired, a bad safetensors header;
// Unsupported where kRequired and the adapter's forward pass cannot run the config
// (Adapter::forward_support).
Result<ModelFolder> open_model_folder(const std::string& path, WeightsNeeded weights);

}  // namespace dayzero::model
