// The verify manifest (manifest.h).
#include "verify/manifest.h"

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

Result<std::map<std::string, ManifestFile>> read_manifest(const std::string& path) {
  DZ_ASSIGN_OR_RETURN(json j, read_json_file(path));
  if (!j.is_object() || j.value("format", "") != kManifestFormat || j.value("version", 0) != 1 ||
      !j.contains("files") || !j["files"].is_array())
    return Status::Corrupt(path + ": not a verify manifest (format " + kManifestFormat + ", version 1, files)");
  std::map<std::string, ManifestFile> out;
  try {
    for (const auto& f : j["files"]) {
      ManifestFile m;
      m.size = f.at("size").get<uint64_t>();
      m.sha256 = f.at("sha256").get<std::string>();
      for (const auto& t : f.at("tensors"))
        m.tensor_xxh64[t.at("name").get<std::string>()] = std::stoull(t.at("xxh64").get<std::string>(), nullptr, 16);
      out[f.at("name").get<std::string>()] = std::move(m);
    }
  } catch (const std::exception& e) {
    return Status::Corrupt(path + ": malformed manifest entry: " + e.what());
  }
  return out;
}

Status write_manifest(const std::string& path, const Report& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    if (!f.present || f.sha256.empty()) continue;
    json ts = json::array();
    for (const auto& t : f.tensors)
      ts.push_back({{"name", t.name}, {"offset", t.offset}, {"nbytes", t.nbytes}, {"xxh64", hex64(t.xxh64)}});
    files.push_back({{"name", f.name}, {"size", f.bytes}, {"sha256", f.sha256}, {"tensors", std::move(ts)}});
  }
  const json j = {{"format", kManifestFormat}, {"version", 1}, {"files", std::move(files)}};
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return Status::IoError(path + ": cannot write the manifest");
  return Status::Ok();
}

}  // namespace dayzero::verify
