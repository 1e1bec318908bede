// Config-class defaults and the origin of every key (defaults.h).
#include "analysis/defaults.h"

#include <sstream>
#include <string_view>

namespace dayzero::analysis {

// data/config_defaults.json, compiled in by src/analysis/CMakeLists.txt (cmake/EmbedText.cmake).
std::string_view config_defaults_json();

namespace {

const nlohmann::json& table() {
  static const nlohmann::json t = [] {
    nlohmann::json j = nlohmann::json::parse(config_defaults_json(), nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.contains("families") ? j : nlohmann::json{{"transformers_version", "?"}, {"families", {}}};
  }();
  return t;
}

std::string entry_string(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

bool absent(const nlohmann::json& j, const std::string& key) { return !j.contains(key) || j[key].is_null(); }

}  // namespace

const char* key_from_name(KeyFrom f) {
  switch (f) {
    case KeyFrom::kConfig: return "config keys";
    case KeyFrom::kFolderCode: return "folder defaults";
    case KeyFrom::kTable: return "transformers defaults";
    case KeyFrom::kDerived: return "derived";
    case KeyFrom::kGuessed: return "guessed";
  }
  return "?";
}

const std::string& defaults_table_version() {
  static const std::string v = entry_string(table(), "transformers_version");
  return v;
}

const nlohmann::json* table_entry(const std::string& model_type) {
  const auto& f = table()["families"];
  auto it = f.find(model_type);
  return it == f.end() || !it->is_object() ? nullptr : &*it;
}

std::optional<int64_t> eval_derived(const std::string& expr, const nlohmann::json& j) {
  const auto operand = [&](const std::string& s) -> std::optional<int64_t> {
    if (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) return std::stoll(s);
    if (!j.contains(s) || !j[s].is_number_integer()) return std::nullopt;
    return j[s].get<int64_t>();
  };
  std::istringstream in(expr);
  std::string a, op, b;
  in >> a >> op >> b;
  auto x = operand(a);
  if (!x || op.empty()) return x;
  auto y = operand(b);
  if (!y) return std::nullopt;
  if (op == "*") return *x * *y;
  if (op == "//" && *y != 0) return *x / *y;
  return std::nullopt;
}

nlohmann::json fill_defaults(const nlohmann::json& section, const std::string& where, const std::string& prefix,
                             const std::string& model_type, const std::vector<PyConfigFile>& code,
                             const nlohmann::json* spec_defaults, KeyOrigins& origins, std::vector<std::string>& risks) {
  nlohmann::json out = section.is_object() ? section : nlohmann::json::object();
  for (const auto& [k, v] : out.items())
    if (!v.is_null()) origins[prefix + k] = {KeyFrom::kConfig, where, v};
  const nlohmann::json* t = model_type.empty() ? nullptr : table_entry(model_type);
  // Aliases of the class (attribute_map: num_experts -> num_local_experts) count as given.
  const auto alias_to = [&](const std::string& from, const std::string& to) {
    if (absent(out, from) || !absent(out, to)) return;
    out[to] = out[from];
    origins[prefix + to] = {KeyFrom::kConfig, where + " (as " + from + ")", out[from]};
  };
  if (t && t->contains("attribute_map") && (*t)["attribute_map"].is_object())
    for (const auto& [alias, key] : (*t)["attribute_map"].items())
      if (key.is_string()) alias_to(alias, key.get<std::string>());
  // The older spellings some classes map or pop from their keyword arguments (BloomConfig and
  // FalconConfig read n_embed as hidden_size; bloom and GPT-2 map n_layer and n_head) stand for
  // the names the analysis reads.
  for (auto [legacy, key] : {std::pair{"n_embed", "hidden_size"}, {"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"},
                             {"n_head", "num_attention_heads"}})
    alias_to(legacy, key);
  const auto take = [&](const nlohmann::json& defaults, KeyFrom from, const std::string& detail) {
    if (!defaults.is_object()) return;
    for (const auto& [k, v] : defaults.items())
      if (!v.is_null() && absent(out, k)) {
        out[k] = v;
        origins[prefix + k] = {from, detail, v};
      }
  };
  // The folder's own class wins over transformers' (a Day-0 release defines its own defaults).
  for (const PyConfigFile& f : code)
    for (const PyConfigClass& c : f.classes) {
      if (c.model_type.empty() || c.model_type != model_type) continue;
      for (const std::string& u : c.unreadable)
        risks.push_back(f.file + " " + c.name + ": default not read (" + u + "); " +
                        (t ? "transformers' default or the analysis's fallback is used" : "the analysis's fallback is used"));
      take(c.defaults, KeyFrom::kFolderCode, f.file + " " + c.name);
    }
  if (spec_defaults) take(*spec_defaults, KeyFrom::kTable, "transformers sub-config defaults of the parent class");
  if (!t) return out;
  const std::string cls = entry_string(*t, "class");
  if (t->contains("defaults")) take((*t)["defaults"], KeyFrom::kTable, "transformers " + defaults_table_version() + " " + cls);
  if (t->contains("derived") && (*t)["derived"].is_object())
    for (const auto& [k, e] : (*t)["derived"].items()) {
      if (!e.is_string() || !absent(out, k)) continue;
      if (auto v = eval_derived(e.get<std::string>(), out)) {
        out[k] = *v;
        origins[prefix + k] = {KeyFrom::kDerived, k + " = " + e.get<std::string>() + " (" + cls + ")", *v};
      }
    }
  return out;
}

}  // namespace dayzero::analysis
