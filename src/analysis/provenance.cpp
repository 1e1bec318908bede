// What each figure rests on (analysis.h add_provenance): the folder's own Python read in, each
// part's basis from its keys' origins, the folder's code findings, transformers_version and
// auto_map, and the register lines they call for.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "analysis/analysis.h"
#include "core/json.h"

namespace dayzero::analysis {
namespace fs = std::filesystem;
namespace {

// A modeling or configuration file larger than this is not a model's source.
constexpr uint64_t kMaxPythonBytes = 8ull << 20;

struct PartKeys {
  const char* part;
  std::vector<const char*> keys;  // "a|b": the first of them the config gives
};
const PartKeys kPartKeys[] = {
    {"embedding", {"vocab_size", "hidden_size"}},
    {"lm_head", {"vocab_size", "hidden_size", "tie_word_embeddings"}},
    {"attention projections", {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"}},
    {"MLA projections",
     {"hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
      "qk_rope_head_dim", "v_head_dim"}},
    {"dense MLP", {"hidden_size", "num_hidden_layers", "intermediate_size"}},
    {"routed experts",
     {"hidden_size", "num_hidden_layers", "num_local_experts|num_experts|n_routed_experts", "moe_intermediate_size"}},
    {"shared experts", {"hidden_size", "n_shared_experts|shared_expert_intermediate_size", "moe_intermediate_size"}},
    {"router", {"hidden_size", "num_local_experts|num_experts|n_routed_experts"}},
    {"norms", {"hidden_size", "num_hidden_layers"}},
    {"linear attention",
     {"hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"}},
    {"vision tower",
     {"vision_config.hidden_size|vision_config.vt_hidden_size", "vision_config.intermediate_size|vision_config.vt_intermediate_size",
      "vision_config.num_hidden_layers|vision_config.depth|vision_config.vt_num_hidden_layers"}},
    {"projector", {"vision_config.hidden_size|vision_config.vt_hidden_size", "hidden_size"}},
};

int rank(KeyFrom f) {
  switch (f) {
    case KeyFrom::kConfig: return 0;
    case KeyFrom::kFolderCode:
    case KeyFrom::kTable: return 1;
    case KeyFrom::kDerived: return 2;
    case KeyFrom::kGuessed: return 3;
  }
  return 3;
}

const char* rank_kind(int r) { return r == 0 ? "config keys" : r == 1 ? "defaults" : r == 2 ? "derived" : "guessed"; }

// "4.51.0.dev0" -> {4, 51, 0}; missing parts are 0.
std::vector<int> version(const std::string& v) {
  std::vector<int> out;
  std::istringstream in(v);
  std::string part;
  while (out.size() < 3 && std::getline(in, part, '.')) out.push_back(std::atoi(part.c_str()));
  out.resize(3, 0);
  return out;
}

std::string value_text(const nlohmann::json& v) { return v.is_null() ? std::string("?") : json_excerpt(v, 24); }

}  // namespace

Result<FolderCode> read_folder_code(const std::string& folder) {
  FolderCode code;
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".py") == 0 &&
        (n.rfind("configuration_", 0) == 0 || n.rfind("modeling_", 0) == 0))
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    DZ_ASSIGN_OR_RETURN(const std::string text, read_regular_file(p.string(), kMaxPythonBytes));
    const std::string n = p.filename().string();
    if (n.rfind("configuration_", 0) == 0) code.configs.push_back(parse_python_config(text, n));
    else code.modeling.push_back(scan_modeling(text, n));
  }
  return code;
}

Status read_modeling_path(const std::string& path, FolderCode& code) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.size() > 3 && n.compare(n.size() - 3, 3, ".py") == 0 && n.rfind("modeling_", 0) == 0) files.push_back(it->path());
    }
    if (files.empty()) return Status::InvalidArgument(path + ": --modeling folder has no modeling_*.py");
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path, ec)) {
    if (fs::path(path).extension() != ".py") return Status::InvalidArgument(path + ": --modeling file is not a .py file");
    files.push_back(path);
  } else {
    return Status::NotFound(path + ": --modeling path does not exist");
  }
  for (const fs::path& p : files) {
    const std::string n = p.filename().string();
    if (std::any_of(code.modeling.begin(), code.modeling.end(), [&](const ModelingScan& m) { return m.file == n; })) continue;
    DZ_ASSIGN_OR_RETURN(const std::string text, read_regular_file(p.string(), kMaxPythonBytes));
    code.modeling.push_back(scan_modeling(text, n));
  }
  return Status::Ok();
}

void add_provenance(Analysis& a, const nlohmann::json& config, const FolderCode* code) {
  const ModelDims& d = a.dims;
  a.risks.insert(a.risks.begin(), d.risks.begin(), d.risks.end());
  // Every config key accounted for; the unrecognised ones are risks with their values.
  a.keys = account_keys(config);
  for (const KeyAccount& k : a.keys)
    if (k.cls == KeyClass::kUnrecognised) a.risks.push_back("unrecognised config key " + k.key + " = " + k.value + ": " + k.what);
  for (const Finding& f : a.features)
    if (f.status == FeatureStatus::kReview) a.risks.push_back("needs review: " + f.name + " (" + f.detail + "; evidence: " + f.evidence + ")");
  if (a.closest.find("differs in: ") != std::string::npos) a.risks.push_back(a.closest);
  const bool generic = a.adapter.empty();
  // Each part's basis: the weakest origin among the keys its shapes come from.
  for (const auto& [part, n] : a.parts) {
    if (n <= 0) continue;
    Basis b;
    if (a.source == Source::kHeaders) {
      a.basis[part] = {"exact", "safetensors headers"};
      continue;
    }
    int worst = 0;
    std::string named;
    for (const PartKeys& pk : kPartKeys) {
      if (part != pk.part) continue;
      for (const char* alternatives : pk.keys) {
        std::istringstream in(alternatives);
        std::string key;
        while (std::getline(in, key, '|')) {
          auto it = d.origins.find(key);
          if (it == d.origins.end()) continue;
          const KeyOrigin& o = it->second;
          worst = std::max(worst, rank(o.from));
          if (o.from != KeyFrom::kConfig)
            named += (named.empty() ? "" : "; ") + key + " " + value_text(o.value) + " from " + key_from_name(o.from) + " (" +
                     o.detail + ")";
          break;
        }
      }
    }
    b.kind = a.source == Source::kIndexNames && worst == 0 ? "index" : rank_kind(worst);
    b.detail = std::string(a.source == Source::kIndexNames ? "index names; shapes from config keys" : "config keys") +
               (named.empty() ? "" : "; " + named);
    if (generic && worst == 3) a.risks.push_back(part + " rests on a guess: " + named);
    a.basis[part] = b;
  }
  // A part the guess makes empty has no count to mark: a dense layer without an FFN width.
  if (const auto mlp = a.parts.find("dense MLP"); generic && (mlp == a.parts.end() || mlp->second <= 0)) {
    auto it = d.origins.find("intermediate_size");
    int64_t dense_layers = 0;
    for (int64_t l = 0; l < d.text.n_layer; ++l) dense_layers += d.text.is_moe_layer(l) ? 0 : 1;
    if (dense_layers > 0 && it != d.origins.end() && it->second.from == KeyFrom::kGuessed)
      a.risks.push_back("dense MLP rests on a guess: intermediate_size is in neither config.json nor a class default; " +
                        std::to_string(dense_layers) + " dense layer(s) counted without an FFN");
  }
  if (generic && d.text_class.empty()) {
    bool folder_class = false;
    for (const auto& [k, o] : d.origins) folder_class = folder_class || o.from == KeyFrom::kFolderCode;
    if (code)  // the folder defines the class even when config.json writes out all it defaults
      for (const PyConfigFile& f : code->configs)
        for (const PyConfigClass& c : f.classes) folder_class = folder_class || c.model_type == d.text.model_type;
    if (!folder_class)
      a.risks.push_back("model_type '" + d.text.model_type + "' is in neither transformers " + defaults_table_version() +
                        " nor a configuration_*.py of the folder: keys config.json leaves out are the analysis's fallbacks");
  }
  // transformers_version and auto_map: who wrote the config, and whose code defines the model.
  if (config.is_object() && config.contains("transformers_version") && config["transformers_version"].is_string()) {
    a.transformers_version = config["transformers_version"].get<std::string>();
    if (version(a.transformers_version) > version(defaults_table_version()))
      a.risks.push_back("config.json was written by transformers " + a.transformers_version +
                        ", newer than the defaults table (" + defaults_table_version() +
                        "): class defaults may have changed since (tools/make_config_defaults.py)");
  }
  if (config.is_object() && config.contains("auto_map") && config["auto_map"].is_object()) {
    for (const auto& [cls, target] : config["auto_map"].items()) {
      const std::string t = target.is_string() ? target.get<std::string>()
                            : target.is_array() && !target.empty() && target[0].is_string() ? target[0].get<std::string>()
                                                                                            : json_excerpt(target);
      a.auto_map.push_back(cls + " -> " + t);
      const size_t dot = t.rfind('.');
      if (dot == std::string::npos || !code) continue;
      const std::string module = t.substr(0, dot);
      if (module.find("--") != std::string::npos) {
        a.risks.push_back("auto_map " + cls + " names code in another repository (" + t + "): not read");
        continue;
      }
      bool found = false;
      for (const auto& c : code->configs) found = found || c.file == module + ".py";
      for (const auto& m : code->modeling) found = found || m.file == module + ".py";
      const bool readable = module.rfind("configuration_", 0) == 0 || module.rfind("modeling_", 0) == 0;
      if (!found && readable)
        a.risks.push_back("auto_map " + cls + " names " + module + ".py, which is not in the folder: the model's own code was not read");
    }
    if (!a.auto_map.empty())
      a.notes.push_back("auto_map: the model is defined by the folder's own Python (remote code), not by transformers");
  }
  if (!code) return;
  a.modeling = code->modeling;
  for (const ModelingScan& m : code->modeling)
    for (const ModuleAccount& x : m.modules)
      if (x.block.empty())
        a.risks.push_back("unmatched " + x.kind + " " + m.file + ":" + std::to_string(x.line) + " " + x.name +
                          (x.base.empty() ? "" : " (" + x.base + ")") + ": no dayzero block is matched to it by its computation" +
                          (x.hint.empty() ? "" : "; its name suggests " + x.hint + " (a name proves nothing)") +
                          (x.how.empty() ? "" : "; " + x.how));
  for (const ModelingScan& m : code->modeling)
    for (const CodeFinding& f : m.findings) {
      const bool known = std::any_of(a.features.begin(), a.features.end(), [&](const Finding& x) { return x.name == f.name; });
      if (!known)
        // A name or an import is evidence, never a proof: what maps to a block still needs review.
        a.features.push_back({f.name, "in " + m.file, f.evidence, f.supported ? FeatureStatus::kReview : FeatureStatus::kNewBlock,
                              f.supported ? "keyword evidence only (" + f.block + ")" : f.block, f.name, ""});
      if (!f.supported) a.risks.push_back(m.file + ": " + f.name + " " + f.block + " (" + f.evidence + ")");
    }
}

}  // namespace dayzero::analysis
