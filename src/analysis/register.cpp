// The model register (register.h): identity and hash of a model's config.json, its entry as a
// YAML map, loading with the shape checked, the update rule (name + config hash, else name),
// the atomic write and the Markdown page.
#include "analysis/register.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "checkpoint/xxhash.h"
#include "core/clock.h"
#include "core/json.h"

namespace dayzero::analysis {
namespace fs = std::filesystem;
namespace {

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string attention_kind(const TextDims& t) {
  int64_t n_linear = 0;
  for (int64_t l = 0; l < t.n_layer; ++l) n_linear += t.is_linear_layer(l);
  if (t.o_groups > 0) {  // DeepSeek-V4: one shared KV head; compressed layer kinds beside
    int64_t csa = 0, hca = 0;
    for (int64_t l = 0; l < t.n_layer; ++l) csa += t.compressed_kind(l) == "csa", hca += t.compressed_kind(l) == "hca";
    return "shared-KV sliding window (DeepSeek-V4): " + std::to_string(csa) + " compressed sparse + " + std::to_string(hca) +
           " heavily compressed + " + std::to_string(t.n_layer - csa - hca) + " window only";
  }
  std::string full = t.kv_lora > 0          ? "MLA"
                     : t.n_head_kv == 1     ? "MQA"
                     : t.n_head_kv < t.n_head ? "GQA"
                                            : "MHA";
  if (t.index_topk > 0) full += " + sparse indexer (DSA)";
  if (n_linear == 0) return full;
  return "hybrid: " + std::to_string(n_linear) + (t.kda_heads > 0 ? " linear (Kimi Delta Attention) + " : " linear (Gated DeltaNet) + ") +
         std::to_string(t.n_layer - n_linear) + " full " + full;
}

YAML::Node components(const model::ComponentParams& c) {
  YAML::Node n;
  n["embedding"] = c.embedding;
  n["attention"] = c.attention;
  n["dense_mlp"] = c.dense_mlp;
  n["routed_experts"] = c.routed_experts;
  n["shared_experts"] = c.shared_experts;
  n["router"] = c.router;
  n["norms"] = c.norms;
  n["lm_head"] = c.lm_head;
  n["vision"] = c.vision;
  n["mtp_head"] = c.mtp_head;
  n["other"] = c.other;
  return n;
}

// A scalar of a node that may lack it (entries of other tools are rendered too): "" then.
// Const lookups only: a non-const operator[] or a Node assignment would change the entry.
std::string str(const YAML::Node& n, const std::string& a, const std::string& b = "") {
  try {
    if (!n.IsMap()) return "";
    const YAML::Node x = n[a];
    if (b.empty()) return x && x.IsScalar() ? x.as<std::string>() : "";
    if (!x || !x.IsMap()) return "";
    const YAML::Node y = x[b];
    return y && y.IsScalar() ? y.as<std::string>() : "";
  } catch (const YAML::Exception&) {
    return "";
  }
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

// "671026419712" -> "671,026,419,712"; not a number: as given.
std::string grouped(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return s;
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string gb(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return s;
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", std::stod(s) / 1e9);
  return b;
}

}  // namespace

Result<ModelIdentity> identify_model(const std::string& path) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  ModelIdentity id;
  id.source = fs::absolute(path, ec).lexically_normal().string();
  if (id.source.empty()) id.source = path;
  id.config_path = dir ? (fs::path(path) / "config.json").string() : path;
  // The hash is of the bytes as read; the parse is the bounded one every model-folder read uses.
  DZ_ASSIGN_OR_RETURN(const std::string b, read_regular_file(id.config_path, kMaxJsonFileBytes));
  id.config_hash = "xxh64:" + hex16(checkpoint::xxh64(b.data(), b.size()));
  DZ_ASSIGN_OR_RETURN(const nlohmann::json config, parse_json_limited(b, id.config_path));
  if (config.is_object() && config.contains("architectures") && config["architectures"].is_array())
    for (const auto& x : config["architectures"])
      if (x.is_string()) id.architectures.push_back(x.get<std::string>());
  fs::path p = fs::path(id.source);
  if (dir) {
    if (!p.has_filename()) p = p.parent_path();
    id.name = p.filename().string(), id.name_from = "folder";
  } else if (p.filename() == "config.json") {
    id.name = p.parent_path().filename().string(), id.name_from = "folder";
  } else {
    id.name = p.stem().string(), id.name_from = "file";
  }
  if (id.name.empty() || id.name == "." || id.name == "/") {
    id.name.clear();
    if (config.is_object() && config.contains("_name_or_path") && config["_name_or_path"].is_string())
      id.name = config["_name_or_path"].get<std::string>(), id.name_from = "_name_or_path";
  }
  if (id.name.empty()) return Status::InvalidArgument(id.config_path + ": no model name (folder, file or _name_or_path)");
  return id;
}

YAML::Node register_entry(const Analysis& a, const ModelIdentity& id, const std::string& date) {
  const TextDims& t = a.dims.text;
  YAML::Node e;
  e["name"] = id.name;
  e["name_from"] = id.name_from;
  e["source"] = id.source;
  e["date"] = date;
  e["config_hash"] = id.config_hash;
  e["model_type"] = a.dims.model_type;
  YAML::Node arch(YAML::NodeType::Sequence);
  for (const auto& x : id.architectures) arch.push_back(x);
  e["architectures"] = arch;
  e["adapter"] = a.adapter;
  e["analysis_source"] = source_name(a.source);
  YAML::Node s;
  s["layers"] = t.n_layer;
  s["hidden"] = t.hidden;
  s["heads"] = t.n_head;
  s["kv_heads"] = t.n_head_kv;
  s["head_dim"] = t.head_dim;
  s["vocab"] = t.vocab;
  s["experts"] = t.n_expert;
  s["experts_per_token"] = t.top_k;
  s["shared_experts"] = t.n_shared;
  s["moe_layers"] = a.n_moe_layers;
  s["mtp_layers"] = t.n_mtp;
  s["attention"] = attention_kind(t);
  if (a.dims.vision) s["vision"] = a.dims.vision->model_type + ", " + std::to_string(a.dims.vision->n_layer) + " layers";
  e["structure"] = s;
  YAML::Node f(YAML::NodeType::Sequence);
  for (const auto& x : a.features) {
    YAML::Node n;
    n["name"] = x.name;
    n["status"] = feature_status_name(x.status);
    n["block"] = x.block;
    n["detail"] = x.detail;
    n["evidence"] = x.evidence;
    if (!x.proof.empty()) n["proof"] = x.proof;
    f.push_back(n);
  }
  e["features"] = f;
  if (!a.closest.empty()) e["closest"] = a.closest;
  // Every config key under a heading: counts, and each unrecognised key with its value.
  YAML::Node keys;
  size_t n_keys[3] = {0, 0, 0};
  YAML::Node unrecognised(YAML::NodeType::Map);
  for (const auto& k : a.keys) {
    n_keys[static_cast<int>(k.cls)] += 1;
    if (k.cls == KeyClass::kUnrecognised) unrecognised[k.key] = k.value;
  }
  keys["understood"] = n_keys[0];
  keys["irrelevant"] = n_keys[1];
  if (n_keys[2] > 0) keys["unrecognised"] = unrecognised;
  e["keys"] = keys;
  YAML::Node unmatched(YAML::NodeType::Sequence);
  for (const auto& m : a.modeling)
    for (const auto& x : m.modules)
      if (x.block.empty()) unmatched.push_back(m.file + ":" + std::to_string(x.line) + " " + x.name);
  if (unmatched.size() > 0) e["unmatched"] = unmatched;
  YAML::Node p;
  p["total"] = a.total;
  p["activated"] = a.activated;
  p["mtp"] = a.mtp_total;
  p["components"] = components(a.main);
  e["parameters"] = p;
  YAML::Node q;
  q["method"] = a.dims.quant_method.empty() ? "none" : a.dims.quant_method;
  q["detail"] = a.dims.quant_detail;
  q["torch_dtype"] = a.dims.torch_dtype;
  q["scale_tensors"] = a.scale_tensors;
  e["quantization"] = q;
  YAML::Node m;
  m["basis"] = "total parameters (MTP apart) x bytes per weight";
  m["f32"] = a.total * 4;
  m["bf16"] = a.total * 2;
  m["fp8"] = a.total;
  m["int4"] = a.total / 2;
  m["stored"] = a.weight_bytes;
  e["memory_bytes"] = m;
  YAML::Node notes(YAML::NodeType::Sequence);
  for (const auto& n : a.notes) notes.push_back(n);
  e["notes"] = notes;
  YAML::Node basis;
  for (const auto& [part, b] : a.basis) basis[part] = b.detail == b.kind ? b.kind : b.kind + " (" + b.detail + ")";
  if (!a.basis.empty()) e["basis"] = basis;
  // Only when there are any: an empty sequence does not read back as the node it was written from.
  YAML::Node risks(YAML::NodeType::Sequence);
  for (const auto& r : a.risks) risks.push_back(r);
  if (!a.risks.empty()) e["risks"] = risks;
  return e;
}

Result<std::vector<YAML::Node>> load_register(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::vector<YAML::Node>{};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": not a register (YAML error: " + e.what() + ")");
  }
  if (!root || root.IsNull()) return std::vector<YAML::Node>{};
  if (!root.IsSequence()) return Status::InvalidArgument(path + ": not a register (expected a YAML sequence of entries)");
  std::vector<YAML::Node> out;
  for (size_t i = 0; i < root.size(); ++i) {
    const YAML::Node e = root[i];
    if (!e.IsMap() || !e["name"] || !e["name"].IsScalar())
      return Status::InvalidArgument(path + ": entry " + std::to_string(i) + " is not a map with a scalar 'name'");
    out.push_back(e);
  }
  return out;
}

const char* upsert_name(Upsert u) {
  switch (u) {
    case Upsert::kAdded: return "added";
    case Upsert::kSameHash: return "updated (same name and config hash)";
    case Upsert::kByName: return "updated (same name, config hash changed)";
  }
  return "?";
}

Upsert upsert_entry(std::vector<YAML::Node>& entries, const YAML::Node& entry) {
  const std::string name = str(entry, "name"), hash = str(entry, "config_hash");
  // A new vector built by copy construction: YAML::Node's operator= writes through to the node it
  // refers to, so entries are never assigned.
  const auto replace = [&](size_t i) {
    std::vector<YAML::Node> out;
    out.reserve(entries.size());
    for (size_t j = 0; j < entries.size(); ++j) out.push_back(j == i ? entry : entries[j]);
    entries.swap(out);
  };
  for (size_t i = 0; i < entries.size(); ++i)
    if (str(entries[i], "name") == name && str(entries[i], "config_hash") == hash) {
      replace(i);
      return Upsert::kSameHash;
    }
  for (size_t i = 0; i < entries.size(); ++i)
    if (str(entries[i], "name") == name) {
      replace(i);
      return Upsert::kByName;
    }
  entries.push_back(entry);
  return Upsert::kAdded;
}

Status write_register(const std::string& path, const std::vector<YAML::Node>& entries) {
  YAML::Emitter out;
  out << YAML::BeginSeq;
  for (const auto& e : entries) out << e;
  out << YAML::EndSeq;
  if (!out.good()) return Status::Internal(path + ": YAML emitter: " + out.GetLastError());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status::IoError(tmp + ": cannot create");
    f << "# dayzero model register: one entry per model, kept by `dayzero inspect --register`\n"
      << out.c_str() << "\n";
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return Status::IoError(tmp + ": write failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    return Status::IoError(path + ": rename from " + tmp + " failed: " + ec.message());
  }
  return Status::Ok();
}

void print_markdown(std::ostream& o, const std::vector<YAML::Node>& entries) {
  o << "# Model register\n\n";
  for (const auto& e : entries) {
    o << "## " << str(e, "name") << "\n\n";
    std::string arch;
    if (e["architectures"] && e["architectures"].IsSequence())
      for (const auto& x : e["architectures"])
        if (x.IsScalar()) arch += (arch.empty() ? "" : ", ") + x.as<std::string>();
    const std::string adapter = str(e, "adapter");
    o << "- source: `" << str(e, "source") << "`\n"
      << "- date (UTC): " << str(e, "date") << "; config " << str(e, "config_hash") << "\n"
      << "- model_type: " << str(e, "model_type") << (arch.empty() ? "" : " (" + arch + ")") << "; "
      << (adapter.empty() ? "no adapter" : "adapter " + adapter) << "\n"
      << "- structure: " << str(e, "structure", "layers") << " layers, hidden " << str(e, "structure", "hidden")
      << ", heads " << str(e, "structure", "heads") << "/" << str(e, "structure", "kv_heads") << ", attention "
      << str(e, "structure", "attention");
    if (str(e, "structure", "experts") != "" && str(e, "structure", "experts") != "0")
      o << ", " << str(e, "structure", "experts") << " experts (top-" << str(e, "structure", "experts_per_token")
        << ") in " << str(e, "structure", "moe_layers") << " layers";
    if (!str(e, "structure", "vision").empty()) o << ", vision " << str(e, "structure", "vision");
    o << "\n- parameters (" << str(e, "analysis_source") << "): total " << grouped(str(e, "parameters", "total"))
      << ", activated/token " << grouped(str(e, "parameters", "activated")) << ", MTP apart "
      << grouped(str(e, "parameters", "mtp")) << "\n"
      << "- quantization: " << str(e, "quantization", "method") << " " << str(e, "quantization", "detail") << "\n"
      << "- weight memory: f32 " << gb(str(e, "memory_bytes", "f32")) << ", bf16 " << gb(str(e, "memory_bytes", "bf16"))
      << ", fp8 " << gb(str(e, "memory_bytes", "fp8")) << ", int4 " << gb(str(e, "memory_bytes", "int4"))
      << "; as stored " << gb(str(e, "memory_bytes", "stored")) << "\n\n";
    std::vector<std::string> unsupported, review;
    if (e["features"] && e["features"].IsSequence() && e["features"].size() > 0) {
      o << "| feature | status | block / what is missing | evidence |\n|---|---|---|---|\n";
      for (const auto& f : e["features"]) {
        const std::string status = str(f, "status");
        o << "| " << cell(str(f, "name")) << " | " << cell(status) << " | " << cell(str(f, "block")) << " | "
          << cell(str(f, "evidence")) << " |\n";
        if (status == "needs a new block" || status == "unknown") unsupported.push_back(str(f, "name"));
        if (status == "needs review") review.push_back(str(f, "name"));
      }
      o << "\n";
    }
    o << "Unsupported: ";
    if (unsupported.empty()) o << "none";
    for (size_t i = 0; i < unsupported.size(); ++i) o << (i ? ", " : "") << unsupported[i];
    o << "\n";
    if (!review.empty()) {
      o << "Needs review: ";
      for (size_t i = 0; i < review.size(); ++i) o << (i ? ", " : "") << review[i];
      o << "\n";
    }
    if (const std::string c = str(e, "closest"); !c.empty())
      o << "Closest: " << cell(c.rfind("closest: ", 0) == 0 ? c.substr(9) : c) << "\n";
    if (e["unmatched"] && e["unmatched"].IsSequence() && e["unmatched"].size() > 0) {
      o << "Unmatched modules: ";
      bool first = true;
      for (const auto& u : e["unmatched"])
        if (u.IsScalar()) o << (first ? "" : ", ") << cell(u.as<std::string>()), first = false;
      o << "\n";
    }
    if (e["keys"] && e["keys"]["unrecognised"] && e["keys"]["unrecognised"].IsMap()) {
      o << "Unrecognised keys: ";
      bool first = true;
      for (const auto& kv : e["keys"]["unrecognised"]) {
        if (!kv.first.IsScalar() || !kv.second.IsScalar()) continue;
        o << (first ? "" : ", ") << cell(kv.first.as<std::string>()) << " = " << cell(kv.second.as<std::string>());
        first = false;
      }
      o << "\n";
    }
    o << "\n";
  }
}

}  // namespace dayzero::analysis
