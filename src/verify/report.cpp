// The verify report (report.h).
#include "verify/report.h"

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
std::string verdict(const Report& r, const FileResult& f) {
  std::string v;
  for (const auto& x : r.findings)
    if (x.error && x.file == f.name && v.find(x.kind) == std::string::npos) v += (v.empty() ? "" : ",") + x.kind;
  if (!v.empty()) return v;
  for (const auto& x : r.findings)
    if (x.file == f.name && x.kind == "no_expected_hash") return "ok (no expected hash)";
  return "ok";
}
}  // namespace

json to_json(const Report& r) {
  json files = json::array();
  for (const auto& f : r.files) {
    json ts = json::array();
    for (const auto& t : f.tensors) {
      json tj = {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"offset", t.offset}, {"nbytes", t.nbytes}};
      if (!r.structure_only) tj["xxh64"] = hex64(t.xxh64);
      ts.push_back(std::move(tj));
    }
    json fj = {{"name", f.name}, {"present", f.present}, {"rank", f.rank}, {"bytes", f.bytes}, {"seconds", f.seconds},
               {"verdict", verdict(r, f)}, {"tensors", std::move(ts)}};
    if (!r.structure_only) fj["sha256"] = f.sha256;
    files.push_back(std::move(fj));
  }
  json findings = json::array();
  for (const auto& x : r.findings)
    findings.push_back({{"kind", x.kind}, {"file", x.file}, {"tensor", x.tensor}, {"detail", x.detail},
                        {"severity", x.error ? "error" : "note"}});
  json ranks = json::array();
  for (const auto& rt : r.ranks)
    ranks.push_back({{"rank", rt.rank}, {"files", rt.files}, {"bytes", rt.bytes}, {"seconds", rt.seconds}});
  return {{"model_dir", r.model_dir},
          {"world_size", r.world_size},
          {"sha256_impl", r.sha256_impl},
          {"inventory", r.inventory},
          {"expected", r.expected},
          {"structure_only", r.structure_only},
          {"files", std::move(files)},
          {"findings", std::move(findings)},
          {"errors", r.errors()},
          {"total_bytes", r.total_bytes},
          {"wall_seconds", r.wall_seconds},
          {"throughput_bytes_per_s", !r.structure_only && r.wall_seconds > 0 ? static_cast<double>(r.total_bytes) / r.wall_seconds : 0.0},
          {"ranks", std::move(ranks)},
          {"exit_code", r.exit_code()}};
}

std::string to_text(const Report& r) {
  std::ostringstream o;
  size_t w = 4;
  for (const auto& f : r.files) w = std::max(w, f.name.size());
  o << "verify      " << r.model_dir << ": " << r.files.size() << " file(s) over " << r.world_size << " rank(s), sha256 "
    << r.sha256_impl << (r.structure_only ? ", structure only (no tensor bytes read)" : "") << "\n"
    << "inventory   " << r.inventory << "\n"
    << "expected    " << (!r.expected.empty() ? r.expected
        : r.structure_only ? "none given (sizes and headers only)"
                           : "none given (hashes computed, not compared)") << "\n";
  o << std::left << std::setw(static_cast<int>(w)) << "file" << std::right << std::setw(16) << "bytes" << std::setw(9)
    << "seconds" << std::setw(6) << "rank" << "  verdict\n";
  for (const auto& f : r.files) {
    o << std::left << std::setw(static_cast<int>(w)) << f.name << std::right << std::setw(16) << f.bytes << std::setw(9)
      << std::fixed << std::setprecision(2) << f.seconds << std::setw(6) << (f.rank < 0 ? std::string("-") : std::to_string(f.rank))
      << "  " << verdict(r, f) << "\n";
  }
  if (!r.findings.empty()) {
    o << "findings    " << r.errors() << " error(s), " << r.findings.size() - static_cast<size_t>(r.errors()) << " note(s)\n";
    for (const auto& x : r.findings)
      o << "  " << (x.error ? "ERROR " : "note  ") << x.kind << "  " << (x.file.empty() ? "" : x.file)
        << (x.tensor.empty() ? "" : (x.file.empty() ? "" : ": ") + x.tensor) << ": " << x.detail << "\n";
  }
  const double gbs = r.wall_seconds > 0 ? static_cast<double>(r.total_bytes) / r.wall_seconds / 1e9 : 0.0;
  if (r.structure_only)
    o << "throughput  structure only: the headers of " << std::fixed << std::setprecision(3)
      << static_cast<double>(r.total_bytes) / 1e9 << " GB of files read in " << r.wall_seconds << " s\n";
  else
    o << "throughput  " << std::fixed << std::setprecision(3) << static_cast<double>(r.total_bytes) / 1e9 << " GB in "
    << r.wall_seconds << " s: " << gbs << " GB/s\n";
  o << "ranks      ";
  for (const auto& rt : r.ranks) o << " " << rt.rank << ":" << rt.files << " files " << rt.seconds << " s;";
  o << "\nresult      " << (r.exit_code() == 0 ? "ok" : "FAILED (" + std::to_string(r.errors()) + " error(s))") << "\n";
  return o.str();
}

}  // namespace dayzero::verify
