// Fuzz target: config.json -> adapter -> hparams -> tensor specs -> the inspect report, the
// path `inspect` and `plan` take on an untrusted config (model/model_folder.h's steps, from
// text instead of a file), with the same refusal of absurd layer and expert counts.
#include <cstdint>
#include <string_view>

#include "core/json.h"
#include "model/inspect.h"
#include "model/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  auto config = parse_json_limited(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  if (!config.ok()) return 0;
  auto adapter = model::find_adapter(*config);
  if (!adapter.ok()) return 0;
  auto hp = (*adapter)->parse_hparams(*config);
  if (!hp.ok()) return 0;
  if (!model::check_tensor_count(*hp).ok()) return 0;  // what open_model_folder refuses
  const auto specs = (*adapter)->tensor_specs(*hp);
  const model::ParamReport r = model::inspect_params(*hp, specs, *config);
  (void)model::to_json(r).dump();
  return 0;
}
