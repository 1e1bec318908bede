// Catalog: index.json parsing and the index <-> shard cross-checks.
#include "checkpoint/catalog.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dayzero::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Lexical check only: a symlink inside the folder may still point elsewhere.
bool stays_inside(const std::string& file) {
  if (file.empty()) return false;
  const fs::path p(file);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return ss.str();
}

// weight_map of the index: tensor name -> shard file name (relative to the folder).
Result<std::map<std::string, std::string>> parse_index(const std::string& index_path) {
  DZ_ASSIGN_OR_RETURN(const std::string text, read_text(index_path));
  std::map<std::string, std::string> weight_map;
  try {
    const json j = json::parse(text);
    if (!j.is_object()) return Status::Corrupt(index_path + ": not a JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) {
      return Status::Corrupt(index_path + ": missing object 'weight_map'");
    }
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string()) {
        return Status::Corrupt(index_path + ": weight_map entry '" + name + "' is not a string");
      }
      weight_map[name] = file.get<std::string>();
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(index_path + ": malformed JSON: " + e.what());
  }
  return weight_map;
}

}  // namespace

Result<Catalog> Catalog::open(const std::string& model_dir) {
  Catalog c;
  c.dir_ = model_dir;
  const std::string index_path = (fs::path(model_dir) / kIndexFileName).string();
  const std::string single_path = (fs::path(model_dir) / kSingleFileName).string();
  std::error_code ec;

  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return Status::NotFound(model_dir + ": neither " + kIndexFileName + " nor " + kSingleFileName +
                              " found");
    }
    DZ_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single_path));
    c.files_.push_back(single_path);
    c.tensors_ = f.tensors();
  } else {
    DZ_ASSIGN_OR_RETURN(const auto weight_map, parse_index(index_path));
    std::map<std::string, std::string> first_tensor;  // shard file name -> a tensor mapped to it
    for (const auto& [name, file] : weight_map) {
      if (!stays_inside(file)) {
        return Status::InvalidArgument(index_path + ": weight_map entry '" + name + "' -> '" + file +
                                       "': shard path must be relative and inside the model folder");
      }
      first_tensor.emplace(file, name);
    }
    std::map<std::string, SafetensorsFile> shards;  // shard file name -> header
    std::map<std::string, std::string> owner;       // tensor name -> shard file name holding it
    int i = 0;
    for (const auto& [file, tensor] : first_tensor) {
      ++i;
      const std::string path = (fs::path(model_dir) / file).string();
      if (!fs::exists(path, ec)) {
        return Status::NotFound(index_path + ": shard '" + file + "' (holding tensor '" + tensor +
                                "') does not exist");
      }
      auto f = SafetensorsFile::open(path);
      if (!f.ok()) {
        return f.status().with_context("shard " + std::to_string(i) + " of " +
                                       std::to_string(first_tensor.size()));
      }
      for (const TensorInfo& t : f->tensors()) {
        auto [it, fresh] = owner.emplace(t.name, file);
        if (!fresh) {
          return Status::Corrupt(model_dir + ": tensor '" + t.name + "' is in both shard '" + it->second +
                                 "' and shard '" + file + "'");
        }
        if (!weight_map.contains(t.name)) {
          return Status::Corrupt(path + ": tensor '" + t.name + "' is not in the weight_map of " +
                                 index_path);
        }
      }
      c.files_.push_back(path);
      shards.emplace(file, std::move(f).value());
    }
    for (const auto& [name, file] : weight_map) {
      const TensorInfo* t = shards.at(file).find(name);
      if (!t) {
        return Status::NotFound(index_path + ": tensor '" + name + "' is not in its shard '" + file + "'");
      }
      c.tensors_.push_back(*t);
    }
  }
  std::sort(c.tensors_.begin(), c.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  std::sort(c.files_.begin(), c.files_.end());
  for (const TensorInfo& t : c.tensors_) c.total_bytes_ += t.nbytes;
  return c;
}

const TensorInfo* Catalog::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace dayzero::checkpoint
