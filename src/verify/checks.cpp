// The checks of a verify (checks.h).
#include "verify/checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <mpi.h>

#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/xxhash.h"
#include "verify/progress.h"
#include "comm/mpi_env.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "model/model_folder.h"
#include "verify/expected_hashes.h"
#include "verify/sha256.h"

namespace dayzero::verify {
namespace fs = std::filesystem;
using nlohmann::json;

void check(Report& rep, const CheckpointFiles& plan, const Expectations& ex, const VerifyOptions& o) {
  std::vector<Finding>& out = rep.findings;
  const auto add = [&](std::string kind, std::string file, std::string tensor, std::string detail, bool error = true) {
    out.push_back({std::move(kind), std::move(file), std::move(tensor), std::move(detail), error});
  };
  std::map<std::string, std::pair<const FileResult*, const TensorResult*>> actual;
  std::set<std::string> missing_files;
  for (const auto& f : rep.files) {
    if (!f.present) {
      size_t n = 0;
      for (const auto& [t, file] : plan.weight_map) n += file == f.name;
      add("missing_file", f.name, "", "named by the index for " + std::to_string(n) + " tensors, absent from the folder");
      missing_files.insert(f.name);
      continue;
    }
    if (!f.header_error.empty()) add("bad_header", f.name, "", f.header_error);
    if (!f.read_error.empty()) add("read_error", f.name, "", f.read_error);
    for (const auto& t : f.tensors) {
      auto [it, fresh] = actual.emplace(t.name, std::make_pair(&f, &t));
      if (!fresh) add("duplicate_tensor", f.name, t.name, "also in " + it->second.first->name);
    }
  }
  for (const auto& n : plan.extra_files)
    add("extra_file", n, "", "a .safetensors file in the folder that the index does not name; not verified", false);

  // The index against the headers.
  if (plan.has_index) {
    for (const auto& [tensor, file] : plan.weight_map) {
      if (missing_files.count(file)) continue;
      auto it = actual.find(tensor);
      const FileResult* fr = nullptr;
      for (const auto& f : rep.files)
        if (f.name == file) fr = &f;
      if (fr && !fr->header_error.empty()) continue;  // reported as bad_header
      if (it == actual.end()) add("missing_tensor", file, tensor, "mapped here by the index, absent from the header");
    }
    for (const auto& [name, ft] : actual) {
      auto it = plan.weight_map.find(name);
      if (it == plan.weight_map.end())
        add("unindexed_tensor", ft.first->name, name, "in the header, absent from the index's weight_map");
      else if (it->second != ft.first->name)
        add("unindexed_tensor", ft.first->name, name, "the index maps it to " + it->second);
    }
  }

  // The adapter's inventory.
  const std::string config_path = (fs::path(o.model_dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(config_path, ec)) {
    rep.inventory = "index only (no config.json)";
  } else if (auto m = model::open_model_folder(config_path, model::WeightsNeeded::kIfPresent); !m.ok()) {
    rep.inventory = "index only (" + m.status().message() + ")";
  } else {
    rep.inventory = "adapter " + m->hp.family;
    std::set<std::string> indexed_in_missing;
    for (const auto& [t, file] : plan.weight_map)
      if (missing_files.count(file)) indexed_in_missing.insert(t);
    std::set<std::string> bad_header_files;
    for (const auto& f : rep.files)
      if (f.present && !f.header_error.empty()) bad_header_files.insert(f.name);
    std::set<std::string> claimed;
    for (const auto& spec : m->specs) {
      // A compressed-tensors logical weight: its stored companions are specs of their own.
      const std::optional<Shape> disk = model::on_disk_shape(spec);
      if (!disk) continue;
      claimed.insert(spec.name);
      auto it = actual.find(spec.name);
      if (it == actual.end()) {
        if (indexed_in_missing.count(spec.name)) continue;
        auto w = plan.weight_map.find(spec.name);
        if (w != plan.weight_map.end() && bad_header_files.count(w->second)) continue;
        if (w != plan.weight_map.end()) continue;  // missing_tensor already, from the index
        add("missing_tensor", "", spec.name, "expected by the " + m->hp.family + " adapter, shape " + shape_str(spec.shape));
        continue;
      }
      const auto& [fr, tr] = it->second;
      if (tr->shape != *disk)
        add("wrong_shape", fr->name, spec.name, "shape " + shape_str(tr->shape) + ", expected " + shape_str(*disk));
      if (!model::stored_dtype_fits(spec, tr->dtype))
        add("wrong_dtype", fr->name, spec.name,
            std::string("dtype ") + dtype_name(tr->dtype) + ", expected " + model::expected_dtype(spec));
      if (spec.layer >= m->hp.n_layer)
        add("mtp", fr->name, spec.name, "multi-token-prediction layer " + std::to_string(spec.layer) + ": checked, never loaded", false);
    }
    for (const auto& [name, ft] : actual)
      if (!claimed.count(name))
        add("unknown_tensor", ft.first->name, name, "not in the " + m->hp.family + " adapter's inventory");
  }

  // Expected hashes and the manifest.
  const bool expectations = !ex.hashes.empty() || !ex.manifest.empty();
  for (const auto& f : rep.files) {
    if (!f.present) continue;
    auto h = ex.hashes.find(f.name);
    auto m = ex.manifest.find(f.name);
    if (expectations && h == ex.hashes.end() && m == ex.manifest.end())
      add("no_expected_hash", f.name, "", "not listed in the expected hashes", false);
    if (h != ex.hashes.end()) {
      if (h->second.size && *h->second.size != f.bytes)
        add("size_mismatch", f.name, "", std::to_string(f.bytes) + " bytes, expected " + std::to_string(*h->second.size));
      else if (!f.sha256.empty() && f.sha256 != h->second.sha256)
        add("hash_mismatch", f.name, "", "sha256 " + f.sha256 + ", expected " + h->second.sha256);
    }
    if (m != ex.manifest.end()) {
      if (m->second.size != f.bytes)
        add("size_mismatch", f.name, "", std::to_string(f.bytes) + " bytes, the manifest says " + std::to_string(m->second.size));
      else if (!f.sha256.empty() && f.sha256 != m->second.sha256) {
        if (h == ex.hashes.end() || h->second.sha256 == f.sha256)
          add("hash_mismatch", f.name, "", "sha256 " + f.sha256 + ", the manifest says " + m->second.sha256);
        int changed = 0;
        for (const auto& t : f.tensors) {
          auto mt = m->second.tensor_xxh64.find(t.name);
          if (mt != m->second.tensor_xxh64.end() && mt->second != t.xxh64) {
            add("tensor_changed", f.name, t.name, "bytes [" + std::to_string(t.offset) + ", " +
                                                     std::to_string(t.offset + t.nbytes) + ") differ from the manifest");
            ++changed;
          }
        }
        if (changed == 0)
          add("header_changed", f.name, "", "no tensor's bytes changed: the header or the layout differs from the manifest");
      }
    }
  }
  std::set<std::string> in_checkpoint(plan.files.begin(), plan.files.end());
  for (const auto& [name, e] : ex.hashes) {
    if (in_checkpoint.count(name)) continue;
    const bool shard = name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
    if (shard && std::find(plan.extra_files.begin(), plan.extra_files.end(), name) == plan.extra_files.end())
      add("missing_file", name, "", "listed in the expected hashes, not in the checkpoint");
    else
      add("not_a_shard", name, "", "listed in the expected hashes; not a shard of the checkpoint, not verified", false);
  }

  // Values.
  if (o.scan.any())
    for (const auto& f : rep.files)
      for (const auto& t : f.tensors) {
        if (o.scan.nan && t.nan) add("nan", f.name, t.name, std::to_string(t.nan) + " NaN values");
        if (o.scan.inf && t.inf) add("inf", f.name, t.name, std::to_string(t.inf) + " infinite values");
        if (o.scan.range && t.out_of_range) {
          std::ostringstream os;
          os << t.out_of_range << " finite values with |x| > " << o.scan.range_limit;
          add("out_of_range", f.name, t.name, os.str());
        }
        if (o.scan.range && t.all_zero) add("all_zero", f.name, t.name, "every value is zero", false);
      }

  std::sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.file, a.tensor, a.kind, a.detail) < std::tie(b.file, b.tensor, b.kind, b.detail);
  });
}

}  // namespace dayzero::verify
