// Results of a verify (results.h): scan options, the error count, the JSON form of a file's results.
#include "verify/results.h"

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

Result<ScanOptions> parse_scan_list(const std::string& list) {
  ScanOptions s;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "nan") s.nan = true;
    else if (item == "inf") s.inf = true;
    else if (item == "range") s.range = true;
    else return Status::InvalidArgument("--scan: unknown item '" + item + "' (known: nan, inf, range)");
  }
  if (!s.any()) return Status::InvalidArgument("--scan: empty list (known: nan, inf, range)");
  return s;
}

int Report::errors() const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.error; }));
}

std::string hex64(uint64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

json file_to_json(const FileResult& f) {
  json j = {{"name", f.name}, {"present", f.present}, {"rank", f.rank}, {"bytes", f.bytes}, {"seconds", f.seconds},
            {"sha256", f.sha256}, {"header_error", f.header_error}, {"read_error", f.read_error}};
  json ts = json::array();
  for (const auto& t : f.tensors)
    ts.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"offset", t.offset},
                  {"nbytes", t.nbytes}, {"xxh64", hex64(t.xxh64)}, {"nan", t.nan}, {"inf", t.inf},
                  {"out_of_range", t.out_of_range}, {"all_zero", t.all_zero}});
  j["tensors"] = std::move(ts);
  return j;
}

FileResult file_from_json(const json& j) {
  FileResult f;
  f.name = j.at("name");
  f.present = j.at("present");
  f.rank = j.at("rank");
  f.bytes = j.at("bytes");
  f.seconds = j.at("seconds");
  f.sha256 = j.at("sha256");
  f.header_error = j.at("header_error");
  f.read_error = j.at("read_error");
  for (const auto& t : j.at("tensors")) {
    TensorResult r;
    r.name = t.at("name");
    r.dtype = *parse_dtype(t.at("dtype").get<std::string>());
    r.shape = t.at("shape").get<Shape>();
    r.offset = t.at("offset");
    r.nbytes = t.at("nbytes");
    r.xxh64 = std::stoull(t.at("xxh64").get<std::string>(), nullptr, 16);
    r.nan = t.at("nan");
    r.inf = t.at("inf");
    r.out_of_range = t.at("out_of_range");
    r.all_zero = t.at("all_zero");
    f.tensors.push_back(std::move(r));
  }
  return f;
}

}  // namespace dayzero::verify
