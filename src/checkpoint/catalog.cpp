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
  // tensor name -> shard file name (relative to the folder), sorted by name, each name once
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::optional<uint64_t> total_size;  // metadata.total_size when given
};

bool by_name(const std::pair<std::string, std::string>& a, const std::pair<std::string, std::string>& b) {
  return a.first < b.first;
}

// The fast path for an index as Hugging Face writes it: {"metadata": {scalars, total_size as an
// unsigned integer}, "weight_map": {name: file, ...}}, each key once, other top-level keys
// scalars. It streams the weight_map into a vector, building no tree; anything else makes it
// give up (`false`) and the index is parsed again as a tree, whose checks give the message.
class FastIndexSax {
 public:
  explicit FastIndexSax(Index* out) : out_(out) {}

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar() && !total_size_next(); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar() && !total_size_next(); }
  bool binary(json::binary_t&) { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
  bool number_unsigned(json::number_unsigned_t v) {
    if (!scalar()) return false;
    if (total_size_next()) out_->total_size = v;
    return true;
  }
  bool string(json::string_t& v) {
    if (depth_ == 2 && in_ == In::kWeightMap) {
      out_->weight_map.emplace_back(std::move(key_), std::move(v));
      return true;
    }
    return scalar() && !total_size_next();
  }
  bool key(json::string_t& k) {
    if (depth_ == 1 || (depth_ == 2 && in_ == In::kMetadata)) {
      // Few keys here: a linear look for one given twice (the tree path names it).
      std::vector<std::string>& seen = depth_ == 1 ? top_keys_ : metadata_keys_;
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) return false;
      seen.push_back(k);
    }
    if (depth_ == 1) in_ = k == "metadata" ? In::kMetadata : k == "weight_map" ? In::kWeightMap : In::kOther;
    key_ = std::move(k);
    return true;
  }
  bool saw_weight_map() const {
    return std::find(top_keys_.begin(), top_keys_.end(), "weight_map") != top_keys_.end();
  }
  bool start_object(std::size_t) {
    if (depth_ == 0 || (depth_ == 1 && in_ != In::kOther)) return ++depth_, true;
    return false;
  }
  bool end_object() {
    if (--depth_ == 1) in_ = In::kOther;
    return true;
  }
  bool start_array(std::size_t) { return false; }
  bool end_array() { return false; }

 private:
  enum class In { kOther, kMetadata, kWeightMap };
  // A scalar where one is allowed: a metadata value or another top-level key's value; a
  // weight_map value must be a string (string() takes those).
  bool scalar() const { return (depth_ == 2 && in_ == In::kMetadata) || (depth_ == 1 && in_ == In::kOther); }
  bool total_size_next() const { return depth_ == 2 && in_ == In::kMetadata && key_ == "total_size"; }

  Index* out_;
  int depth_ = 0;
  In in_ = In::kOther;
  std::vector<std::string> top_keys_, metadata_keys_;
  std::string key_;
};

// The tree path: every index, valid or not, with a message naming what is wrong.
Result<Index> parse_index_tree(const std::string& index_path, const std::string& text) {
  JsonParseOptions options;
  options.reject_duplicate_keys = true;  // a tensor mapped twice would silently keep the last shard
  DZ_ASSIGN_OR_RETURN(const json j, parse_json_limited(text, index_path, options));
  Index index;
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
      index.weight_map.emplace_back(name, file.get<std::string>());
    }
  } catch (const json::exception& e) {
    return Status::Corrupt(index_path + ": malformed JSON: " + std::string(e.what()).substr(0, 200));
  }
  std::sort(index.weight_map.begin(), index.weight_map.end(), by_name);
  return index;
}

Result<Index> parse_index(const std::string& index_path, HeaderParser parser) {
  DZ_ASSIGN_OR_RETURN(const std::string text, read_regular_file(index_path, kMaxJsonFileBytes));
  if (parser == HeaderParser::kTree) return parse_index_tree(index_path, text);
  Index index;
  FastIndexSax sax(&index);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &sax) && sax.saw_weight_map();
  } catch (const json::exception&) {
    ok = false;
  }
  if (ok) {
    std::sort(index.weight_map.begin(), index.weight_map.end(), by_name);
    for (size_t i = 1; ok && i < index.weight_map.size(); ++i)
      ok = index.weight_map[i - 1].first != index.weight_map[i].first;
  }
  return ok ? Result<Index>(std::move(index)) : parse_index_tree(index_path, text);
}

}  // namespace

Result<Catalog> Catalog::open(const std::string& model_dir, HeaderParser parser) {
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
    DZ_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single_path, parser));
    c.files_.push_back(single_path);
    c.tensors_ = f.release_tensors();
    for (TensorInfo& t : c.tensors_) t.resolved = resolved;
  } else {
    DZ_ASSIGN_OR_RETURN(const Index index, parse_index(index_path, parser));
    const auto& weight_map = index.weight_map;  // sorted by name
    std::map<std::string, std::string> first_tensor;  // shard file name -> a tensor mapped to it
    for (const auto& [name, file] : weight_map) {
      if (!stays_inside(file)) {
        return Status::InvalidArgument(index_path + ": weight_map entry '" + name + "' -> '" + file +
                                       "': shard path must be relative and inside the model folder");
      }
      first_tensor.emplace(file, name);
    }
    // Per weight_map entry: the shard (by position in first_tensor's order) holding a tensor of
    // that name, and the tensor when it is in the shard the index names.
    std::vector<int> owner(weight_map.size(), -1);
    std::vector<std::string> owner_file;
    std::vector<std::optional<TensorInfo>> found(weight_map.size());
    int i = 0;
    for (const auto& [file, tensor] : first_tensor) {
      const std::string path = (fs::path(model_dir) / file).string();
      auto resolved = resolve_shard(path, index_path + ": shard '" + file + "' (holding tensor '" + tensor + "')");
      if (!resolved.ok()) return resolved.status();
      auto f = SafetensorsFile::open(path, parser);
      if (!f.ok()) {
        return f.status().with_context("shard " + std::to_string(i + 1) + " of " +
                                       std::to_string(first_tensor.size()));
      }
      for (TensorInfo& t : f->release_tensors()) {
        auto it = std::lower_bound(weight_map.begin(), weight_map.end(), std::make_pair(t.name, std::string()), by_name);
        if (it == weight_map.end() || it->first != t.name) {
          return Status::Corrupt(path + ": tensor '" + t.name + "' is not in the weight_map of " +
                                 index_path);
        }
        const size_t k = static_cast<size_t>(it - weight_map.begin());
        if (owner[k] >= 0) {
          return Status::Corrupt(model_dir + ": tensor '" + t.name + "' is in both shard '" + owner_file[owner[k]] +
                                 "' and shard '" + file + "'");
        }
        owner[k] = i;
        if (it->second == file) {
          found[k] = std::move(t);
          found[k]->resolved = *resolved;
        }
      }
      c.files_.push_back(path);
      owner_file.push_back(file);
      ++i;
    }
    c.tensors_.reserve(weight_map.size());
    for (size_t k = 0; k < weight_map.size(); ++k) {
      if (!found[k]) {
        return Status::NotFound(index_path + ": tensor '" + weight_map[k].first + "' is not in its shard '" +
                                weight_map[k].second + "'");
      }
      c.tensors_.push_back(std::move(*found[k]));
    }
    uint64_t sum = 0;
    for (const TensorInfo& t : c.tensors_) sum += t.nbytes;
    if (index.total_size && *index.total_size != sum) {
      return Status::Corrupt(index_path + ": metadata.total_size is " + std::to_string(*index.total_size) +
                             " but the tensors of its weight_map hold " + std::to_string(sum) + " bytes");
    }
  }
  // tensors_ is sorted by name already (a shard's header, or the weight_map's order).
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
