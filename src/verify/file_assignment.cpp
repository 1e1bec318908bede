// The files of a verify and their ranks (file_assignment.h).
#include "verify/file_assignment.h"

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

namespace {

bool safe_relative(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == "..") return false;
  return true;
}

}  // namespace

std::vector<int> assign_by_bytes(const std::vector<uint64_t>& sizes, int world_size) {
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<uint64_t> load(static_cast<size_t>(std::max(world_size, 1)), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (size_t i : order) {
    const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(r);
    load[r] += sizes[i];
  }
  return owner;
}

Result<CheckpointFiles> list_checkpoint_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a folder");
  CheckpointFiles p;
  const std::string index_path = (fs::path(dir) / checkpoint::kIndexFileName).string();
  if (fs::exists(index_path, ec)) {
    p.has_index = true;
    JsonParseOptions opt;
    opt.reject_duplicate_keys = true;
    DZ_ASSIGN_OR_RETURN(json index, read_json_file(index_path, opt));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return Status::Corrupt(index_path + ": no weight_map object");
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        return Status::Corrupt(index_path + ": weight_map entry " + tensor + " is " + json_kind(file) + ", not a file name");
      const std::string f = file.get<std::string>();
      if (!safe_relative(f))
        return Status::InvalidArgument(index_path + ": weight_map entry " + tensor + " names '" + f +
                                       "', which is absolute or leaves the folder");
      p.weight_map[tensor] = f;
      files.insert(f);
    }
    if (files.empty()) return Status::Corrupt(index_path + ": weight_map is empty");
    p.files.assign(files.begin(), files.end());
  } else if (fs::exists(fs::path(dir) / checkpoint::kSingleFileName, ec)) {
    p.files = {checkpoint::kSingleFileName};
  } else {
    return Status::NotFound(dir + ": neither " + checkpoint::kSingleFileName + " nor " + checkpoint::kIndexFileName +
                            " (is it a checkpoint folder?)");
  }
  const std::set<std::string> named(p.files.begin(), p.files.end());
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors" && !named.count(n)) p.extra_files.push_back(n);
  }
  std::sort(p.extra_files.begin(), p.extra_files.end());
  for (const auto& f : p.files) {
    auto rf = open_regular_file((fs::path(dir) / f).string());
    p.present.push_back(rf.ok() || rf.status().code() != StatusCode::kNotFound);
    p.sizes.push_back(rf.ok() ? rf->size : 0);
    p.open_errors.push_back(rf.ok() || rf.status().code() == StatusCode::kNotFound ? "" : rf.status().message());
    if (rf.ok()) ::close(rf->fd);
  }
  return p;
}

}  // namespace dayzero::verify
