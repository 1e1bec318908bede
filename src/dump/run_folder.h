// Names and layout of a run folder: rank-00003.h5, plan.json, config.yaml,
// events/rank-00003.jsonl, live/rank-00003.json, hang/rank-00003.json (docs/design.md "Run folder and HDF5 schema").
// Only paths and directory creation; what goes in each file is dump_writer.h, event_log.h
// and heartbeat.h.
#pragma once

#include <string>

#include "core/status.h"

namespace dayzero::dump {

inline constexpr const char* kPlanFileName = "plan.json";
inline constexpr const char* kConfigFileName = "config.yaml";
inline constexpr const char* kEventsDirName = "events";
inline constexpr const char* kLiveDirName = "live";
inline constexpr const char* kHangDirName = "hang";

// "rank-00003" (five digits, more when the rank needs them). REQUIRES: rank >= 0.
std::string rank_stem(int rank);
// "rank-00003.h5"
std::string rank_file_name(int rank);
// "<dir>/rank-00003.h5"
std::string dump_path(const std::string& dir, int rank);
// "<dir>/events/rank-00003.jsonl"
std::string event_log_path(const std::string& dir, int rank);
// "<dir>/live/rank-00003.json"
std::string heartbeat_path(const std::string& dir, int rank);

// "<dir>/hang/rank-00003.json": the hang report a rank's watchdog writes (diag/hang_report.h);
// the hang folder is made by the writer, not by make_run_folder.
std::string hang_report_path(const std::string& dir, int rank);

// mkdir -p of dir, dir/events (unless !with_events: dump.event_log off) and dir/live. Ok when
// they already exist; IoError naming the directory otherwise. Safe to call from every rank at once.
Status make_run_folder(const std::string& dir, bool with_events = true);

}  // namespace dayzero::dump
