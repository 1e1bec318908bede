// The registry of model families: resolves config.json to an adapter by model_type, then by
// architectures[0]. An unknown family is an error that lists the supported ones.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"
#include "model/adapter.h"

namespace dayzero::model {

Result<const Adapter*> find_adapter(const nlohmann::json& config);
Result<const Adapter*> find_adapter_by_family(const std::string& family);
std::vector<std::string> supported_families();

}  // namespace dayzero::model
