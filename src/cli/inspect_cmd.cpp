// dayzero inspect MODEL_DIR|config.json [--json] [--register FILE.yaml] [--markdown] [--modeling PATH]: what a
// model is and whether dayzero can run it: architecture, parameters by component, total and
// activated per token, dtypes and quantization, features. A folder with weights also gets the
// tensor check; a bare config.json is described from its config alone. A model without an
// adapter gets the family-independent analysis (analysis/analysis.h) instead of a refusal.
// --register keeps the model's entry in a team register; --markdown prints it as a page.
#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "analysis/analysis.h"
#include "analysis/register.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/json.h"
#include "model/inspect.h"
#include "model/model_folder.h"
#include "plan/generic_request.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"

namespace dayzero::cli {
namespace {

// "cache" line: KV bytes per token of the attention layers, state bytes per sequence of the
// linear-attention layers, at bfloat16 (the plan's default compute dtype), tp=1.
void print_cache(std::ostream& o, const std::vector<model::LayerDesc>& layers) {
  const plan::CacheSummary c = plan::summarize_cache(layers, 2);
  o << "cache       " << c.kv_bytes_per_token << " KV bytes per token (" << c.kv_layers << " attention layers)";
  if (c.window_layers > 0)
    o << " + " << c.window_kv_bytes_per_token << " per token up to the window (" << c.window_layers << " layers)";
  if (c.compressed_layers > 0)
    o << " + " << c.compressed_kv_bytes_per_token << " per token in compressed entries (" << c.compressed_layers
      << " layers) and " << c.pending_bytes_per_sequence << " bytes per sequence of compressor tails";
  if (c.state_layers > 0)
    o << ", " << c.state_bytes_per_sequence << " state bytes per sequence (" << c.state_layers
      << " linear-attention layers)";
  o << ", bfloat16, tp=1\n";
}

void print_text(const model::ModelFolder& d, const model::ParamReport& r) {
  const model::HParams& hp = d.hp;
  std::ostream& o = std::cout;
  o << "family      " << hp.family << " (model_type " << hp.model_type << ")\n"
    << "layers      " << hp.n_layer;
  if (hp.n_expert > 0) o << " (" << hp.n_layer - r.n_moe_layers << " dense, " << r.n_moe_layers << " MoE)";
  o << ", hidden " << hp.n_embd << ", heads " << hp.n_head << "/" << hp.n_head_kv << " (q/kv), head_dim "
    << hp.head_dim << ", ffn " << hp.n_ff << "\n";
  if (hp.n_expert > 0) {
    o << "experts     " << hp.n_expert << " routed (top-" << hp.n_expert_used << ", ffn " << hp.n_ff_expert << ")";
    const auto shared = std::find_if(d.layers.begin(), d.layers.end(), [](const model::LayerDesc& l) { return l.ffn.shared_ff > 0; });
    if (shared != d.layers.end()) o << ", shared expert ffn " << shared->ffn.shared_ff;
    o << "\n";
  }
  o << "vocab       " << hp.n_vocab << (hp.tie_embeddings ? " (tied lm_head)" : "") << "\n"
    << "rope        theta " << hp.rope_theta << ", scaling " << hp.rope_scaling.type << "\n";
  print_cache(o, d.layers);
  for (const std::string& line : model::summarize_layers(d.layers)) o << "            " << line << "\n";

  o << "parameters  (from the tensor specs)\n";
  const auto row = [&](const char* name, int64_t v) {
    if (v == 0) return;
    o << "  " << std::left << std::setw(16) << name << std::right << std::setw(20) << model::grouped_count(v) << "  "
      << std::setw(8) << model::human_count(static_cast<double>(v)) << "  " << std::fixed << std::setprecision(2) << std::setw(6)
      << 100.0 * static_cast<double>(v) / static_cast<double>(r.total) << "%\n";
    o.unsetf(std::ios::fixed);
    o << std::setprecision(6);
  };
  const model::ComponentParams& c = r.main;
  row("embedding", c.embedding);
  row("attention", c.attention);
  row("dense_mlp", c.dense_mlp);
  row("routed_experts", c.routed_experts);
  row("shared_experts", c.shared_experts);
  row("router", c.router);
  row("norms", c.norms);
  row("lm_head", c.lm_head);
  row("vision", c.vision);
  row("projector", c.projector);
  row("other", c.other);
  o << "  total           " << std::setw(20) << model::grouped_count(r.total) << "  " << model::human_count(static_cast<double>(r.total))
    << "\n"
    << "  activated/token " << std::setw(20) << model::grouped_count(r.activated) << "  "
    << model::human_count(static_cast<double>(r.activated)) << " (" << model::human_count(static_cast<double>(r.activated_no_embedding))
    << " without the input embedding)\n";
  if (r.mtp_total > 0)
    o << "  mtp (apart)     " << std::setw(20) << model::grouped_count(r.mtp_total) << "  "
      << model::human_count(static_cast<double>(r.mtp_total)) << " in " << hp.n_nextn_layer << " layer(s), not in the total\n";

  o << "dtypes      " << (r.dtype_source == "checkpoint" ? "checkpoint headers" : "from config (estimate)")
    << ", torch_dtype " << (r.torch_dtype.empty() ? "?" : r.torch_dtype) << "\n";
  for (const auto& [name, t] : r.dtypes)
    o << "  " << std::left << std::setw(10) << name << std::right << std::setw(8) << t.tensors << " tensors "
      << std::setw(20) << model::grouped_count(t.elements) << " elements " << std::setw(20) << model::grouped_count(static_cast<int64_t>(t.bytes))
      << " bytes\n";
  o << "  weights          " << model::grouped_count(static_cast<int64_t>(r.weight_bytes)) << " bytes ("
    << std::fixed << std::setprecision(2) << static_cast<double>(r.weight_bytes) / 1e9 << " GB)\n";
  o.unsetf(std::ios::fixed);
  o << std::setprecision(6);
  if (!r.quant_method.empty())
    o << "quantization " << r.quant_method << " " << r.quant_fmt
      << (r.quant_block_rows > 0 ? " " + std::to_string(r.quant_block_rows) + "x" + std::to_string(r.quant_block_cols) +
                                       " blocks"
                                 : std::string())
      << ": " << model::grouped_count(r.quantized_params) << " params quantized; "
      << r.scale_tensors << " scale tensors, " << model::grouped_count(static_cast<int64_t>(r.scale_bytes))
      << " bytes of metadata (not parameters)\n";
  else
    o << "quantization none\n";
  o << "features\n";
  for (const auto& f : r.features)
    o << "  " << std::left << std::setw(22) << f.name << std::setw(12) << model::support_name(f.support) << std::right
      << f.detail << "\n";
}

// The inspection itself (text or JSON); its exit code.
int inspect(const std::string& path, bool json, const std::string& modeling) {
  auto d = model::open_model_folder(path, model::WeightsNeeded::kIfPresent);
  auto generic = analysis::analyze_path(path, d.ok() && d->has_weights ? &d->catalog : nullptr, modeling);
  if (!generic.ok() && !modeling.empty() && generic.status().message().find("--modeling") != std::string::npos) {
    std::cerr << "dayzero inspect: " << generic.status().message() << std::endl;
    return generic.status().exit_code();
  }
  const bool fallback = !d.ok() && generic.ok() &&
                        (d.status().code() == StatusCode::kUnsupported || generic->source == analysis::Source::kIndexNames);
  if (fallback) {
    if (json) {
      nlohmann::json j = analysis::to_json(*generic);
      j["adapter_status"] = d.status().message();
      std::cout << j.dump(2) << std::endl;
    } else {
      std::cout << "adapter     " << d.status().message() << "\n";
      analysis::print_text(std::cout, *generic);
      const std::vector<model::LayerDesc> layers = analysis::describe_layers(generic->dims.text);
      print_cache(std::cout, layers);
      for (const std::string& line : model::summarize_layers(layers)) std::cout << "            " << line << "\n";
    }
    return 0;
  }
  if (!d.ok() && d.status().code() == StatusCode::kUnsupported && !generic.ok()) {
    std::cerr << "dayzero inspect: " << d.status().message() << "; generic analysis: " << generic.status().message()
              << std::endl;
    return generic.status().exit_code();
  }
  if (!d.ok()) {
    std::cerr << "dayzero inspect: " << d.status().message() << std::endl;
    return d.status().exit_code();
  }
  const model::ParamReport r =
      model::inspect_params(d->hp, d->specs, d->config, d->has_weights ? &d->catalog : nullptr);
  Status check = Status::Ok();
  if (d->has_weights) check = runtime::check_tensors(*d);
  if (json) {
    nlohmann::json j = model::to_json(r);
    j["family"] = d->hp.family;
    j["model_type"] = d->hp.model_type;
    j["n_layer"] = d->hp.n_layer;
    j["n_embd"] = d->hp.n_embd;
    j["n_vocab"] = d->hp.n_vocab;
    j["n_expert"] = d->hp.n_expert;
    j["n_expert_used"] = d->hp.n_expert_used;
    j["weights"] = d->has_weights;
    if (d->has_weights) j["check"] = check.ok() ? "ok" : check.message();
    if (generic.ok()) j["analysis"] = analysis::to_json(*generic);
    std::cout << j.dump(2) << std::endl;
  } else {
    print_text(*d, r);
    if (generic.ok()) analysis::print_features(std::cout, *generic);
    if (d->has_weights)
      std::cout << "tensors     " << d->catalog.tensors().size() << " in "
                << d->catalog.files().size() << " file(s), " << d->catalog.total_bytes()
                << " bytes\n"
                << "check       " << (check.ok() ? "ok" : check.message()) << std::endl;
    else
      std::cout << "check       no weights (config only)" << std::endl;
  }
  return check.exit_code();
}

// --register / --markdown: the register is read (and its shape checked) before anything is
// written; an inspection that fails leaves it alone.
int register_and_page(const std::string& path, bool json, const std::string& register_path, bool markdown,
                      const std::string& modeling) {
  std::vector<YAML::Node> entries;
  if (!register_path.empty()) {
    auto loaded = analysis::load_register(register_path);
    if (!loaded.ok()) {
      std::cerr << "dayzero inspect: " << loaded.status().message() << "; left unchanged" << std::endl;
      return loaded.status().exit_code();
    }
    entries = std::move(*loaded);
  }
  if (!markdown) {
    const int rc = inspect(path, json, modeling);
    if (rc != 0) return rc;
  }
  auto a = analysis::analyze_path(path, nullptr, modeling);
  if (!a.ok()) {
    std::cerr << "dayzero inspect: " << a.status().message() << std::endl;
    return a.status().exit_code();
  }
  auto id = analysis::identify_model(path);
  if (!id.ok()) {
    std::cerr << "dayzero inspect: " << id.status().message() << std::endl;
    return id.status().exit_code();
  }
  const YAML::Node entry = analysis::register_entry(*a, *id, utc_iso8601(realtime_ns()));
  if (register_path.empty()) {
    analysis::print_markdown(std::cout, {entry});
    return 0;
  }
  const analysis::Upsert u = analysis::upsert_entry(entries, entry);
  if (Status s = analysis::write_register(register_path, entries); !s.ok()) {
    std::cerr << "dayzero inspect: " << s.message() << std::endl;
    return s.exit_code();
  }
  std::cerr << "register    " << register_path << ": " << id->name << " " << analysis::upsert_name(u) << ", "
            << entries.size() << " entr" << (entries.size() == 1 ? "y" : "ies") << std::endl;
  if (markdown) analysis::print_markdown(std::cout, entries);
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, Commands& commands) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto markdown = std::make_shared<bool>(false);
  auto register_path = std::make_shared<std::string>();
  auto modeling = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model (folder or bare config.json) and check its tensors");
  cmd->add_option("model", *path, "Model folder (config.json [+ safetensors]) or a config.json")->required();
  CLI::Option* j = cmd->add_flag("--json", *json, "Print the figures as JSON");
  cmd->add_option("--register", *register_path,
                  "Add or update this model's entry in a register YAML file (created if absent)");
  cmd->add_flag("--markdown", *markdown, "Print the model's register entry (with --register: the whole register) as Markdown")
      ->excludes(j);
  cmd->add_option("--modeling", *modeling,
                  "Modeling code to account for besides the folder's own: a modeling_*.py file or a folder of them "
                  "(transformers' models/<family>/)");
  cmd->callback([&commands, path, json, markdown, register_path, modeling] {
    commands.action = [path, json, markdown, register_path, modeling] {
      if (register_path->empty() && !*markdown) return inspect(*path, *json, *modeling);
      return register_and_page(*path, *json, *register_path, *markdown, *modeling);
    };
  });
}

}  // namespace dayzero::cli
