// Opening a model folder or a bare config.json (model_folder.h).
#include "model/model_folder.h"

#include <filesystem>
#include "core/json.h"
#include "model/fp4_specs.h"
#include "model/registry.h"

namespace dayzero::model {
namespace fs = std::filesystem;

bool has_safetensors(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / checkpoint::kIndexFileName, ec) ||
         fs::exists(fs::path(dir) / checkpoint::kSingleFileName, ec);
}

Result<nlohmann::json> read_config_json(const std::string& path) {
  // Untrusted: a regular file only (a FIFO would block), nesting bounded.
  return read_json_file(path);
}

Result<ModelFolder> open_model_folder(const std::string& path, WeightsNeeded weights) {
  ModelFolder m;
  std::error_code ec;
  // A model to run is always a folder; only plan and inspect take a bare config.json.
  const bool is_dir = weights == WeightsNeeded::kRequired || fs::is_directory(path, ec);
  m.dir = is_dir ? path : "";
  m.config_path = is_dir ? (fs::path(path) / "config.json").string() : path;
  auto config = read_config_json(m.config_path);
  if (!config.ok()) {
    if (config.status().code() != StatusCode::kNotFound) return config.status();
    return Status::NotFound(m.config_path + ": cannot open (is '" + path + "' a model folder" +
                            (weights == WeightsNeeded::kRequired ? "" : " or a config.json") + "?)");
  }
  m.config = std::move(config).value();
  // find_adapter and parse_hparams name config.json itself; its folder completes the path.
  const std::string where = is_dir ? path : fs::path(path).parent_path().string();
  const auto in_context = [&](const Status& s) { return where.empty() ? s : s.with_context(where); };
  auto adapter = find_adapter(m.config);
  if (!adapter.ok()) return in_context(adapter.status());
  m.adapter = *adapter;
  auto hp = m.adapter->parse_hparams(m.config);
  if (!hp.ok()) return in_context(hp.status());
  if (Status s = check_tensor_count(*hp); !s.ok()) return in_context(s);
  m.hp = std::move(hp).value();
  m.specs = m.adapter->tensor_specs(m.hp);
  // FP4 experts (compressed-tensors mxfp4- / nvfp4-pack-quantized) for any family with routed
  // experts: the adapter's routed-expert weights become the format's logical weights.
  auto fp4 = checkpoint::parse_fp4_quant(m.config, "config.json");
  if (!fp4.ok()) return in_context(fp4.status());
  if (*fp4)
    if (Status s = apply_fp4_quant(m.specs, **fp4); !s.ok()) return in_context(s);
  m.layers = describe_layers(*m.adapter, m.hp, m.specs);
  if (weights == WeightsNeeded::kRequired)
    if (Status s = m.adapter->forward_support(m.hp); !s.ok()) return in_context(s);
  if (is_dir && (weights == WeightsNeeded::kRequired || has_safetensors(path))) {
    DZ_ASSIGN_OR_RETURN(m.catalog, checkpoint::Catalog::open(path));
    m.has_weights = true;
  }
  return m;
}

}  // namespace dayzero::model
