// Catalog: index.json parsing and the index <-> shard cross-checks.
#include "checkpoint/catalog.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/json.h"

namespace dayzero::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Lexical check only: a symlink inside the folder may still point elsewhere (resolve_shard).
bool stays_inside(const std::string& file) {
  if (file.empty()) return false;
  const fs::path p(file);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

// A shard may be a symlink (a Hugging Face cache links snapshots/ into blobs/): it must resolve
// to a regular file. Returns its real path when a link was followed, else "". what names the
// shard in messages (the index and the entry, or the path itself).
Result<std::string> resolve_shard(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    if (fs::is_symlink(fs::symlink_status(path, ec)))
      return Status::NotFound(what + ": a symlink that resolves to nothing");
    return Status::NotFound(what + " does not exist");
  }
  if (!fs::is_regular_file(st)) {
    return Status::InvalidArgument(what + " does not resolve to a regular file (a FIFO, device or folder is refused)");
  }
  const fs::path real = fs::canonical(path, ec);
  if (ec) return Status::IoError(what + ": cannot resolve its path: " + ec.message());
  const fs::path parent = fs::canonical(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path(), ec);
  if (!ec && real == parent / fs::path(path).filename()) return std::string();
  return real.string();
}

struct Index {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name (relative to the folder)
  std::optional<uint64_t> total_size;             // metadata.total_size when given
};

Result<Index> parse_index(const std::string& index_path) {
  JsonParseOptions options;
  options.reject_duplicate_keys = true;  // a tensor mapped twice would silently keep the last shard
  DZ_ASSIGN_OR_RETURN(const json j, read_json_file(index_path, options));
  Index index;
  std::map<std::string, std::string>& weight_map = index.weight_map;
  try {
    if (!j.is_object()) return Status::Corrupt(index_path + ": not a JSON object");
    if (auto md = j.find("metadata"); md != j.end() && !md->is_null()) {
      if (!md->is_object()) return Status::Corrupt(index_path + ": 'metadata' is " + std::string(json_kind(*md)) + ", not an object");
      if (auto ts = md->find("total_size"); ts != md->end() && !ts->is_null()) {
        if (!ts->is_number_unsigned())
          return Status::Corrupt(index_path + ": metadata.total_size is " + json_excerpt(*ts) +
                                 ", not a non-negative integer");
        index.total_size = ts->get<uint64_t>();
      }
    }
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) {
      return Status::Corrupt(index_path + ": missing object 'weight_map'");
    }
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string()) {
        return Status::Corrupt(index_path + ": weight_map entry '" + name + "' is " + json_kind(file) +
                               ", not a file name");
      }
      weight_map[name] = file.get<std::string>();
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(index_path + ": malformed JSON: " + std::string(e.what()).substr(0, 200));
  }
  return index;
}

}  // namespace

Result<Catalog> Catalog::open(const std::string& model_dir) {
  Catalog c;
  c.dir_ = model_dir;
  const std::string index_path = (fs::path(model_dir) / kIndexFileName).string();
  const std::string single_path = (fs::path(model_dir) / kSingleFileName).string();
  std::error_code ec;

  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec) && !fs::is_symlink(fs::symlink_status(single_path, ec))) {
      return Status::NotFound(model_dir + ": neither " + kIndexFileName + " nor " + kSingleFileName +
                              " found");
    }
    DZ_ASSIGN_OR_RETURN(const std::string resolved, resolve_shard(single_path, single_path));
    DZ_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single_path));
    c.files_.push_back(single_path);
    c.tensors_ = f.tensors();
    for (TensorInfo& t : c.tensors_) t.resolved = resolved;
  } else {
    DZ_ASSIGN_OR_RETURN(const Index index, parse_index(index_path));
    const auto& weight_map = index.weight_map;
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
    std::map<std::string, std::string> resolved_of;  // shard file name -> real path when a symlink
    int i = 0;
    for (const auto& [file, tensor] : first_tensor) {
      ++i;
      const std::string path = (fs::path(model_dir) / file).string();
      auto resolved = resolve_shard(path, index_path + ": shard '" + file + "' (holding tensor '" + tensor + "')");
      if (!resolved.ok()) return resolved.status();
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
      resolved_of.emplace(file, *resolved);
      shards.emplace(file, std::move(f).value());
    }
    for (const auto& [name, file] : weight_map) {
      const TensorInfo* t = shards.at(file).find(name);
      if (!t) {
        return Status::NotFound(index_path + ": tensor '" + name + "' is not in its shard '" + file + "'");
      }
      c.tensors_.push_back(*t);
      c.tensors_.back().resolved = resolved_of.at(file);
    }
    uint64_t sum = 0;
    for (const TensorInfo& t : c.tensors_) sum += t.nbytes;
    if (index.total_size && *index.total_size != sum) {
      return Status::Corrupt(index_path + ": metadata.total_size is " + std::to_string(*index.total_size) +
                             " but the tensors of its weight_map hold " + std::to_string(sum) + " bytes");
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
