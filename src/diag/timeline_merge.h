// Reading a run folder's per-rank trails for `dayzero timeline`: each rank's event log
// (events/rank-N.jsonl, begin/end lines paired into slices, the "meta" line with host,
// coordinates and clock offset) and its heartbeat (live/rank-N.json), plus the merged Chrome
// trace / Perfetto JSON. Works on the folder of a job that hung or died: no HDF5 file needed.
// Each log is streamed once (known begin/end lines by a dedicated parser, anything else by the
// bounded JSON reader) into per-rank summaries and per-(group, seq) aggregates, so memory does
// not grow with ranks x events unless the slices are kept for a Chrome trace. Not the analysis
// (timeline_analysis.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
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

// A completed non-communication slice's total per rank: phases ("phase" "load", "prefill" "a").
struct PhaseTotal {
  std::string kind, name;
  double seconds = 0;  // summed over the rank's completed slices of that kind and name, in begin order
};

// Which seqs of one group a rank entered, as sorted disjoint [first, last] intervals (one when
// its seqs run 0, 1, 2, ...), and the entered seqs it never completed (sorted).
struct GroupPresence {
  int group = -1;  // index into RunTrails::groups
  std::vector<std::pair<int64_t, int64_t>> entered;
  std::vector<int64_t> open;
  bool has(int64_t seq) const;
  bool completed(int64_t seq) const;
};

struct RankTrail {
  int rank = 0;
  bool has_log = false;
  std::string host = "?";  // from the meta line, else the heartbeat
  int dp = -1, pp = -1, tp = -1;
  int64_t clock_offset_ns = 0;
  std::vector<Slice> slices;  // in begin order, only when kept (TrailOptions); "abort" records excluded
  std::string abort_reason;   // the watchdog's or SIGTERM's line, when the rank wrote one
  int64_t abort_ns = -1;      // when it wrote it, rank 0's clock
  int64_t last_event_ns = -1; // the latest begin or end time of a slice, rank 0's clock
  int skipped_lines = 0;      // malformed or unpaired lines, skipped
  // The heartbeat, when readable: its time in rank 0's clock, phase, current, stopped flag.
  bool has_heartbeat = false;
  int64_t heartbeat_ns = -1;
  std::string hb_phase, hb_current;
  bool hb_stopped = false;
  // Summary of the slices, always kept (a few hundred bytes a rank):
  int64_t n_slices = 0;
  int64_t first_begin_ns = -1;             // earliest slice begin; -1 without slices
  std::vector<PhaseTotal> phases;          // in the order of each one's first completed slice
  std::string last_event;                  // "begin of all_reduce #39 of tp@pp1.dp0", "end of phase load"
  std::string waiting_in;                  // the last open communication slice in begin order
  int64_t waiting_begin_ns = -1;
  std::string last_comm_group;             // group of the last communication slice in begin order
  std::vector<GroupPresence> presence;     // one per group it communicated in
  // The communication share of the prompts: the rank's `phase prompts` seconds (0 when it has
  // no completed one) and the seconds of its completed communication slices inside that phase,
  // per group kind (the label before '@': "tp", "pp", "ep", "world", ...), in first-seen order.
  double prompts_s = 0;
  std::vector<std::pair<std::string, double>> prompts_comm_s;
};

// One (group, seq): the ranks that entered it, on rank 0's clock. 40 bytes.
struct SeqAggregate {
  int64_t min_begin_ns = 0, max_begin_ns = 0;
  int32_t last_rank = -1;  // the rank with max_begin_ns (the lowest of equal ones)
  int32_t name_rank = -1;  // the highest rank that entered; op and p2p are its slice's
  uint32_t entered = 0, completed = 0;
  uint16_t op = 0;         // index into RunTrails::op_names
  bool p2p = false;
};

struct GroupAggregate {
  std::string label;
  std::vector<int> members;           // ranks with a communication slice in it, sorted
  std::vector<SeqAggregate> dense;    // seq 0, 1, ... (entered == 0 where no rank entered)
  std::map<int64_t, SeqAggregate> sparse;  // seqs that do not fit the dense run (negative, far ahead)
};

// What dayzero-launch recorded of the launcher (launch/launch.json, launch/supervisor.json);
// empty when the run was started another way.
struct LauncherRecord {
  std::string host;            // where the launcher (mpirun, srun) ran
  bool ended_by_supervisor = false;
  std::string signal;          // SIGTERM or SIGKILL
  std::string first_report;    // "hang/rank-00001.json"
  double waited_s = 0;         // from that report to ending the launcher
};

struct RunTrails {
  std::string run_dir;
  LauncherRecord launcher;
  std::vector<RankTrail> ranks;  // index = world rank
  int64_t t0_ns = 0;             // earliest time seen, rank 0's clock
  int64_t end_ns = 0;            // latest event or abort record seen (heartbeats: only if none)
  std::vector<GroupAggregate> groups;  // sorted by label
  std::vector<std::string> op_names;
};

// launch/launch.json and launch/supervisor.json of run_dir (absent or unreadable: empty fields).
LauncherRecord read_launcher_record(const std::string& run_dir);

struct TrailOptions {
  bool keep_slices = true;  // RankTrail::slices (O(events) memory): needed by chrome_trace only
  int threads = 2;          // files read in parallel
};

// Reads every events/rank-N.jsonl of run_dir (the world size from plan.json when readable,
// else the highest rank file present + 1). Lines of the exact form EventLog::append writes are
// read by a dedicated parser, any other line by parse_json_limited; a malformed line (or one
// over 64 KiB) is counted in skipped_lines, never thrown. Memory: about 300 bytes a rank plus
// 40 bytes a (group, seq), plus the slices when options.keep_slices (about 150 bytes each).
// NotFound when run_dir has no events folder; InvalidArgument when no event log is in it.
Result<RunTrails> load_run_trails(const std::string& run_dir, const TrailOptions& options = {});

// The Chrome trace event format (chrome://tracing, ui.perfetto.dev): one process per node
// (named by host), one thread per rank ("rank 2 (pp 1, tp 0)"), every slice an "X" event
// (ts/dur in microseconds from t0) with args group, seq, bytes; a slice that never ended
// runs to the end of the trace with args.open = true. REQUIRES: t loaded with keep_slices.
nlohmann::ordered_json chrome_trace(const RunTrails& t);

}  // namespace dayzero::diag
