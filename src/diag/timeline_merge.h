// Reading a run folder's per-rank trails for `dayzero timeline`: each rank's event log
// (events/rank-N.jsonl, begin/end lines paired into slices, the "meta" line with host,
// coordinates and clock offset) and its heartbeat (live/rank-N.json), plus the merged Chrome
// trace / Perfetto JSON. Works on the folder of a job that hung or died: no HDF5 file needed.
// Not the analysis (timeline_analysis.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::diag {

// One paired event, times in rank 0's clock (t - clock_offset_ns of the rank).
struct Slice {
  int64_t t_begin_ns = 0;
  int64_t t_end_ns = -1;  // -1: never ended (where the rank is, or died)
  std::string kind, name, group;
  int64_t seq = -1, bytes = 0;
  bool open() const { return t_end_ns < 0; }
};

struct RankTrail {
  int rank = 0;
  bool has_log = false;
  std::string host = "?";  // from the meta line, else the heartbeat
  int dp = -1, pp = -1, tp = -1;
  int64_t clock_offset_ns = 0;
  std::vector<Slice> slices;  // in begin order; "abort" records excluded (see abort_reason)
  std::string abort_reason;   // the watchdog's or SIGTERM's line, when the rank wrote one
  int64_t abort_ns = -1;      // when it wrote it, rank 0's clock
  int64_t last_event_ns = -1; // the latest begin or end time of a slice, rank 0's clock
  int skipped_lines = 0;      // malformed or unpaired lines, skipped
  // The heartbeat, when readable: its time in rank 0's clock, phase, current, stopped flag.
  bool has_heartbeat = false;
  int64_t heartbeat_ns = -1;
  std::string hb_phase, hb_current;
  bool hb_stopped = false;
};

struct RunTrails {
  std::string run_dir;
  std::vector<RankTrail> ranks;  // index = world rank
  int64_t t0_ns = 0;             // earliest time seen, rank 0's clock
  int64_t end_ns = 0;            // latest event or abort record seen (heartbeats: only if none)
};

// Reads every events/rank-N.jsonl of run_dir (the world size from plan.json when readable,
// else the highest rank file present + 1). Lines are parsed with parse_json_limited; a
// malformed line is counted in skipped_lines, never thrown. NotFound when run_dir has no
// events folder; InvalidArgument when no event log is in it.
Result<RunTrails> load_run_trails(const std::string& run_dir);

// The Chrome trace event format (chrome://tracing, ui.perfetto.dev): one process per node
// (named by host), one thread per rank ("rank 2 (pp 1, tp 0)"), every slice an "X" event
// (ts/dur in microseconds from t0) with args group, seq, bytes; a slice that never ended
// runs to the end of the trace with args.open = true.
nlohmann::ordered_json chrome_trace(const RunTrails& t);

}  // namespace dayzero::diag
