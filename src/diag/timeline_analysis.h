// Analysis of a run's merged trails (timeline_merge.h) for `dayzero timeline`: per phase the
// spread of durations over ranks, per collective group the spread of arrival times, and the
// hang analysis: per group and seq which ranks entered, completed, never arrived; each rank's
// last event, whether it waits inside an op, and its heartbeat at the end (alive, dead or
// exited); the nodes whose ranks all died at once; and a verdict naming the node(s) lost and
// the rank(s) the others wait for. Not the file reading.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "diag/timeline_merge.h"

namespace dayzero::diag {

// A heartbeat older than this at the end of the trails (the latest event or abort record of
// any rank) means
// the rank stopped beating: its process is gone or frozen. Beats come every second, and the
// launcher ends a job within a second of a rank's death, so age alone cannot tell the killed
// rank from the others then: when no watchdog expired anywhere yet ranks were SIGTERMed or
// ops left open (the launcher ended the job), a rank that wrote no abort record and was not
// blocked in an op is dead; one blocked in an op was waiting until it was ended.
inline constexpr double kHeartbeatDeadAfterS = 2.5;

struct PhaseStat {
  std::string kind, name;  // "phase" "load", "prefill" "a", "decode" "a"
  int ranks = 0;           // ranks that completed it
  double min_s = 0, median_s = 0, max_s = 0;
  int slowest_rank = -1;
};

struct GroupSpread {
  std::string label;
  int ops = 0;  // seqs that two or more ranks entered
  double median_spread_s = 0, max_spread_s = 0;
  int64_t max_seq = -1;
  int last_rank = -1;  // the last to arrive at max_seq
};

// One op of a group that did not complete on every member.
struct StuckOp {
  std::string label, op;
  bool p2p = false;
  int64_t seq = -1;
  std::vector<int> entered, completed, never;  // world ranks
  int64_t first_entry_ns = 0;
};

struct RankState {
  int rank = 0;
  std::string host;
  int pp = -1, tp = -1;
  std::string last_event;      // "end of all_reduce #39 of tp@pp1.dp0"
  int64_t last_event_ns = -1;
  std::string waiting_in;      // the open op it is inside, empty when none
  double waiting_s = 0;        // from its begin to the end of the trails
  std::string heartbeat;       // "alive", "dead", "exited" or "none"
  double heartbeat_age_s = -1; // at the end of the trails
  std::string abort_reason;
};

// A node whose ranks all died together while the launcher ended the others, or that the network
// cut off (every rank alive and waiting, every open op waiting across hosts: the hosts other
// than the launcher's). The first: when no watchdog
// expired, ranks on other hosts wrote "terminated by SIGTERM" abort records, and not one rank
// of this host wrote any abort record nor exited, the launcher's SIGTERM found no process
// there: the node (or every process on it) was gone. Its ranks are all "dead", those blocked
// in an op as well.
struct LostNode {
  std::string host;
  std::vector<int> ranks;  // world ranks, ascending
};

// One rank's communication share of its phase prompts (prefill and decode of every prompt):
// seconds inside communication ops (collectives and p2p) against the phase's seconds.
struct CommShare {
  int rank = 0;
  std::string host;
  double prompts_s = 0, comm_s = 0;
  std::vector<std::pair<std::string, double>> by_kind;  // "tp", "pp", "ep", "world", ...: seconds
};

struct Analysis {
  int world = 0, nodes = 0;
  std::vector<LostNode> lost_nodes;
  std::vector<PhaseStat> phases;
  std::vector<GroupSpread> groups;
  std::vector<StuckOp> stuck;
  std::vector<RankState> ranks;
  std::vector<CommShare> comm;  // ranks with a completed phase prompts, rank order
  std::vector<int> culprits;  // ranks the others wait for: never arrived, not waiting themselves
  bool launcher_ended_by_supervisor = false;  // dayzero-launch ended the launcher (launch/supervisor.json)
  std::string verdict;        // one paragraph
};

Analysis analyse(const RunTrails& t);
nlohmann::ordered_json to_json(const Analysis& a);
std::string to_text(const Analysis& a);

}  // namespace dayzero::diag
