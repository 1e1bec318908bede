// The distributed verify (verify.h): every rank lists the files and reads the expectations,
// scans the files it owns, all-gathers the results and makes the same checks.
#include "verify/verify.h"

#include "verify/checks.h"
#include "verify/file_scan.h"

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

Result<Report> verify_checkpoint(const VerifyOptions& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Expectations ex;
  auto prepare = [&]() -> Result<CheckpointFiles> {
    DZ_ASSIGN_OR_RETURN(CheckpointFiles plan, list_checkpoint_files(o.model_dir));
    if (!o.hashes_path.empty()) {
      DZ_ASSIGN_OR_RETURN(auto list, read_expected_hashes(o.hashes_path));
      for (auto& e : list) ex.hashes[e.name] = std::move(e);
    }
    if (!o.manifest_in.empty()) {
      DZ_ASSIGN_OR_RETURN(ex.manifest, read_manifest(o.manifest_in));
    }
    return plan;
  };
  Result<CheckpointFiles> planned = prepare();
  DZ_RETURN_IF_ERROR(comm::agree(planned.status()));
  const CheckpointFiles& plan = *planned;

  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < plan.files.size(); ++i) sizes.push_back(plan.present[i] ? plan.sizes[i] : 0);
  const std::vector<int> owner = assign_by_bytes(sizes, world);

  uint64_t to_read = 0;
  if (!o.structure_only)
    for (uint64_t s : sizes) to_read += s;
  VerifyProgress progress(to_read);
  const int64_t t0 = monotonic_ns();
  json mine = json::array();
  for (size_t i = 0; i < plan.files.size(); ++i) {
    if (owner[i] != rank || !plan.present[i]) continue;
    FileResult f = scan_file(o.model_dir, plan.files[i], o, progress);
    if (!plan.open_errors[i].empty() && f.read_error.empty()) f.read_error = plan.open_errors[i];
    f.rank = rank;
    mine.push_back(file_to_json(f));
  }
  const double my_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  progress.finish();
  const std::string payload = json{{"seconds", my_seconds}, {"files", std::move(mine)}}.dump();
  const std::vector<std::string> all = comm::all_gather_strings(payload);

  Report rep;
  rep.model_dir = o.model_dir;
  rep.world_size = world;
  rep.sha256_impl = sha256_impl_name();
  rep.structure_only = o.structure_only;
  rep.expected = o.hashes_path;
  if (!o.manifest_in.empty()) rep.expected += (rep.expected.empty() ? "" : ", ") + std::string("manifest ") + o.manifest_in;
  std::map<std::string, FileResult> by_name;
  for (int r = 0; r < world; ++r) {
    auto j = parse_json_limited(all[static_cast<size_t>(r)], "rank " + std::to_string(r) + " results");
    if (!j.ok()) return j.status();
    RankTime rt;
    rt.rank = r;
    rt.seconds = (*j)["seconds"];
    for (const auto& fj : (*j)["files"]) {
      FileResult f = file_from_json(fj);
      ++rt.files;
      rt.bytes += f.bytes;
      by_name[f.name] = std::move(f);
    }
    rep.ranks.push_back(rt);
    rep.wall_seconds = std::max(rep.wall_seconds, rt.seconds);
  }
  size_t readable = 0;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    auto it = by_name.find(plan.files[i]);
    FileResult f;
    if (it != by_name.end()) f = std::move(it->second);
    else {
      f.name = plan.files[i];
      f.present = false;
    }
    rep.total_bytes += f.bytes;
    readable += f.present && f.header_error.empty() && f.read_error.empty();
    rep.files.push_back(std::move(f));
  }
  if (readable == 0)
    return Status::Corrupt(o.model_dir + ": no shard could be read as safetensors" +
                           (rep.files.empty() ? std::string() : ": " + rep.files[0].name + ": " +
                                (!rep.files[0].present ? std::string("absent")
                                 : !rep.files[0].header_error.empty() ? rep.files[0].header_error
                                                                      : rep.files[0].read_error)));
  check(rep, plan, ex, o);
  Status written = Status::Ok();
  if (rank == 0 && !o.manifest_out.empty()) written = write_manifest(o.manifest_out, rep);
  DZ_RETURN_IF_ERROR(comm::agree(written));
  return rep;
}

}  // namespace dayzero::verify
