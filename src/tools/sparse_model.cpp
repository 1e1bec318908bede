// make-model --like --sparse: a real model's checkpoint layout (names, shapes, dtypes, shard
// files) from its config.json, the adapter's tensor list and optionally its index.json, with
// the data left as holes. Not a converter and not a random-weights model: every tensor reads
// as zeros, so `run` on it is meaningless beyond loading.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/writer.h"
#include "core/json.h"
#include "model/inspect.h"
#include "model/model_folder.h"
#include "model/registry.h"
#include "tools/make_model.h"

namespace dayzero::tools {
namespace fs = std::filesystem;
namespace {

// The first few names of a set, for a message.
std::string some_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 3; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 3) s += ", ...";
  return s;
}

// A shard name from an index is untrusted: a plain file name, never a path out of the folder.
bool plain_shard_name(const std::string& n) {
  return !n.empty() && n.size() <= 255 && n.find('/') == std::string::npos && n.find('\0') == std::string::npos &&
         n != "." && n != ".." && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0;
}

// Copies from to `to`, writable by its owner whatever the source's mode (fixtures are read-only).
Status copy_file_to(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ec);
  if (ec) return Status::IoError("make-model: cannot copy " + from.string() + " to " + to.string() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status make_sparse_like(const SparseLikeOptions& o) {
  if (o.out_dir.empty()) return Status::InvalidArgument("make-model: --out is required");
  std::error_code ec;
  const fs::path like = fs::absolute(fs::path(o.like));
  const fs::path config_path = fs::is_directory(like, ec) ? like / "config.json" : like;
  DZ_ASSIGN_OR_RETURN(const nlohmann::json config, model::read_config_json(config_path.string()));
  auto adapter = model::find_adapter(config);
  if (!adapter.ok())
    return adapter.status().with_context(config_path.string() +
                                         ": a sparse checkpoint needs the tensor list of an adapter");
  auto parsed = (*adapter)->parse_hparams(config);
  if (!parsed.ok()) return parsed.status().with_context(config_path.string());
  DZ_RETURN_IF_ERROR(model::check_tensor_count(*parsed));
  const model::HParams hp = std::move(parsed).value();
  const std::vector<model::TensorSpec> specs = (*adapter)->tensor_specs(hp);
  const model::ParamReport report = model::inspect_params(hp, specs, config);

  // Every tensor with its stored dtype; an FP8 weight's scale follows it (the adapter lists
  // scales last), so shards packed in this order keep a weight next to its scale.
  std::map<std::string, const model::TensorSpec*> by_name;
  for (const auto& s : specs) by_name[s.name] = &s;
  std::vector<checkpoint::HoleTensor> tensors;
  std::set<std::string> placed;
  const auto place = [&](const model::TensorSpec& s) -> Status {
    if (!placed.insert(s.name).second) return Status::Ok();
    const std::string dt = model::stored_dtype_name(s, report);
    const auto dtype = parse_dtype(dt);
    if (!dtype)
      return Status::InvalidArgument(config_path.string() + ": torch_dtype '" + dt +
                                     "' is no safetensors dtype (tensor " + s.name + ")");
    tensors.push_back({s.name, *dtype, s.shape});
    return Status::Ok();
  };
  for (const auto& s : specs) {
    if (s.component == model::Component::kQuantScale) continue;
    DZ_RETURN_IF_ERROR(place(s));
    if (!s.stored.scale.empty() && by_name.count(s.stored.scale)) DZ_RETURN_IF_ERROR(place(*by_name[s.stored.scale]));
  }
  for (const auto& s : specs) DZ_RETURN_IF_ERROR(place(s));
  uint64_t total = 0;
  for (const auto& t : tensors) total += static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);

  // tensor -> shard file name: the index's, or packed by size.
  std::map<std::string, std::string> shard_of;
  std::vector<std::string> shard_names;  // every shard file, in order
  if (!o.index_path.empty()) {
    DZ_ASSIGN_OR_RETURN(const nlohmann::json index, read_json_file(o.index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return Status::InvalidArgument(o.index_path + ": no weight_map object");
    std::set<std::string> shards;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || !plain_shard_name(file.get<std::string>()))
        return Status::InvalidArgument(o.index_path + ": tensor " + name + ": shard " + json_excerpt(file) +
                                       " is not a plain .safetensors file name");
      shard_of[name] = file.get<std::string>();
      shards.insert(file.get<std::string>());
    }
    shard_names.assign(shards.begin(), shards.end());
    std::vector<std::string> missing, unknown;
    for (const auto& t : tensors)
      if (!shard_of.count(t.name)) missing.push_back(t.name);
    for (const auto& [name, file] : shard_of)
      if (!placed.count(name)) unknown.push_back(name);
    if (!missing.empty() || !unknown.empty())
      return Status::InvalidArgument(
          o.index_path + ": its tensors differ from the " + hp.family + " adapter's for " + config_path.string() + ": " +
          std::to_string(missing.size()) + " missing" + (missing.empty() ? "" : " (" + some_names(missing) + ")") +
          ", " + std::to_string(unknown.size()) + " unknown" + (unknown.empty() ? "" : " (" + some_names(unknown) + ")"));
    if (index.contains("metadata") && index["metadata"].is_object() && index["metadata"].contains("total_size")) {
      const auto& ts = index["metadata"]["total_size"];
      if (!ts.is_number_unsigned() || ts.get<uint64_t>() != total)
        return Status::InvalidArgument(o.index_path + ": metadata.total_size is " + json_excerpt(ts) + " but the " +
                                       std::to_string(tensors.size()) + " tensors with the config's dtypes hold " +
                                       std::to_string(total) + " bytes");
    }
  } else {
    // transformers' rule: a tensor opens a new shard when it would overflow a non-empty one.
    std::vector<std::vector<std::string>> groups(1);
    uint64_t in_shard = 0;
    for (const auto& t : tensors) {
      const uint64_t n = static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
      if (!groups.back().empty() && in_shard + n > o.max_shard_bytes) {
        groups.emplace_back();
        in_shard = 0;
      }
      groups.back().push_back(t.name);
      in_shard += n;
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, groups.size());
      const std::string file = groups.size() == 1 ? std::string(checkpoint::kSingleFileName) : std::string(buf);
      shard_names.push_back(file);
      for (const auto& n : groups[i]) shard_of[n] = file;
    }
  }

  return write_model_folder(o.out_dir, [&](const fs::path& out) -> Status {
    DZ_RETURN_IF_ERROR(copy_file_to(config_path, out / "config.json"));
    for (const char* extra : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      const fs::path p = config_path.parent_path() / extra;
      std::error_code e;
      if (fs::is_regular_file(p, e)) DZ_RETURN_IF_ERROR(copy_file_to(p, out / extra));
    }
    std::map<std::string, std::vector<checkpoint::HoleTensor>> per_shard;
    for (const std::string& s : shard_names) per_shard[s];
    for (const auto& t : tensors) per_shard[shard_of.at(t.name)].push_back(t);
    for (auto& [file, list] : per_shard)
      DZ_RETURN_IF_ERROR(checkpoint::write_sparse_safetensors((out / file).string(), std::move(list), {{"format", "pt"}}));
    if (!o.index_path.empty()) {
      DZ_RETURN_IF_ERROR(copy_file_to(o.index_path, out / checkpoint::kIndexFileName));
    } else if (shard_names.size() > 1) {
      DZ_RETURN_IF_ERROR(checkpoint::write_index(out.string(), shard_of, total));
    }
    return Status::Ok();
  });
}

}  // namespace dayzero::tools
