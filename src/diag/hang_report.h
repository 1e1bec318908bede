// Hang report: what one rank's watchdog leaves in hang/rank-00003.json when it gives up on
// an op: its own view (the op, group, seq, how long it waited) and what the heartbeat files of
// the other ranks said at that moment (phase, current op, heartbeat age). Written from the
// watchdog thread while the main thread is blocked; not the analysis across ranks
// (timeline_analysis.h reads these files afterwards).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::diag {

// This rank's view at expiry. op is empty when no op was in flight (a phase deadline).
struct HangSelf {
  int rank = 0;
  std::string host;
  std::string reason;  // the watchdog's one-line message
  std::string phase;
  std::string op, group, label;  // "all_reduce", "tp", "tp@pp1.dp0"
  int64_t seq = -1, bytes = 0;
  int peer = -1;        // p2p: the group rank of the other side
  std::vector<int> members;  // world ranks of the group, in group-rank order; empty: the world
  double waited_s = 0;  // since the op began
  std::string stalled_before;  // debug.stall: the op this rank stopped before; else empty
  // This rank's last events, oldest first: the whole flight-recorder ring (watchdog.ring_events;
  // also the events begun before the event log was open, or with no event log at all):
  // {t_begin_ns, t_end_ns (-1: open), kind, name, group, seq, bytes}.
  nlohmann::ordered_json last_events = nlohmann::ordered_json::array();
  int64_t events_total = 0;  // events this rank ever began; the first events_total - last_events.size() fell out
  // Where the rank sits (the event log's meta line: rank, world_size, host, dp, pp, tp, ep,
  // etp, clock_offset_ns); null before it is known.
  nlohmann::ordered_json placement;
};

// The report object: {"rank", "host", "reason", "t_ns", "phase", "op": {...} or null,
// "stalled_before" (only under debug.stall), "placement" (only once known), "last_events" (the
// ring, oldest first), "events_total",
// "peers": [{"rank", "phase", "current", "heartbeat_age_s", "stopped", "host", "pid"} or
// {"rank", "error"}], "suspects": [world ranks]}. suspects: for a send/recv, the other side;
// for a collective, the members of the group whose heartbeat does not show them inside the
// same op (its "current" does not start with "<op> #<seq> of <label>"), dead or alive. Heartbeats are read through read_json_file and never throw: a missing
// or malformed one becomes an "error" entry. now_ns: CLOCK_REALTIME.
nlohmann::ordered_json make_hang_report(const std::string& run_dir, int world_size, const HangSelf& self,
                                int64_t now_ns);

// mkdir -p run_dir/hang, then writes the report (2-space JSON) to hang/rank-<r>.json.
// IoError naming the path when it cannot.
Status write_hang_report(const std::string& run_dir, const nlohmann::ordered_json& report, int rank);

}  // namespace dayzero::diag
