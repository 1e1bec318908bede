// Run folder paths and creation.
#include "dump/run_folder.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/check.h"

namespace dayzero::dump {

std::string rank_stem(int rank) {
  DZ_CHECK(rank >= 0, "rank " << rank);
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d", rank);
  return buf;
}

std::string rank_file_name(int rank) { return rank_stem(rank) + ".h5"; }

std::string dump_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / rank_file_name(rank)).string();
}

std::string event_log_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / kEventsDirName / (rank_stem(rank) + ".jsonl")).string();
}

std::string heartbeat_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / kLiveDirName / (rank_stem(rank) + ".json")).string();
}

std::string hang_report_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / kHangDirName / (rank_stem(rank) + ".json")).string();
}

Status make_run_folder(const std::string& dir, bool with_events) {
  if (dir.empty()) return Status::InvalidArgument("run folder: empty path");
  const std::filesystem::path root(dir);
  std::vector<std::filesystem::path> dirs = {root, root / kLiveDirName};
  if (with_events) dirs.push_back(root / kEventsDirName);
  for (const auto& p : dirs) {
    std::error_code ec;
    std::filesystem::create_directories(p, ec);
    // create_directories races benignly between ranks; what matters is that it exists now.
    if (ec && !std::filesystem::is_directory(p)) {
      return Status::IoError("run folder: cannot create " + p.string() + ": " + ec.message());
    }
    if (!std::filesystem::is_directory(p)) {
      return Status::IoError("run folder: " + p.string() + " exists and is not a directory");
    }
  }
  return Status::Ok();
}

}  // namespace dayzero::dump
