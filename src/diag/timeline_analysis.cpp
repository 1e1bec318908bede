// Phase and arrival spreads, and the hang analysis, over a run's aligned trails.
#include "diag/timeline_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace dayzero::diag {
namespace {

double secs(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

std::string fmt(double v, const char* f = "%.3f") {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string ranks_text(const std::vector<int>& v) {
  if (v.empty()) return "none";
  std::string s;
  for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string who(const RankState& r) {
  std::string s = "rank " + std::to_string(r.rank) + " (node " + r.host;
  if (r.pp >= 0) s += ", pp " + std::to_string(r.pp) + ", tp " + std::to_string(r.tp);
  return s + ")";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

namespace {

// " The launcher did not exit ...; dayzero-launch ended it" when its supervisor did.
std::string launcher_note(const RunTrails& t) {
  if (!t.launcher.ended_by_supervisor) return "";
  return " The launcher did not exit after the ranks gave up; dayzero-launch ended it (" + t.launcher.signal + ") " +
         fmt(t.launcher.waited_s, "%.1f") + " s after " + t.launcher.first_report + ".";
}

// A network partition: every rank gave up waiting (inside a logged op, or by an abort record
// that names the op it waited in, which the event log may not show: the agreement after a
// phase),
// none is missing without waiting itself, and every op left open waits across hosts (the ranks
// inside it on one host; those it waits for, or whose side of a send completed, on another).
// Which side is lost is a matter of viewpoint; the job's is the launcher's host (dayzero-launch's
// record, else rank 0's host). The hosts cut off from it become lost nodes; returns the
// verdict's opening sentence (empty: no partition).
std::string cut_off_nodes(const RunTrails& t, Analysis& a) {
  if (a.nodes < 2 || !a.culprits.empty()) return "";
  std::set<std::string> waiting_anywhere;
  for (const RankState& r : a.ranks) {
    // Its watchdog gave up on an op, or the launcher ended it while it waited in one.
    const bool gave_up = r.abort_reason.find("watchdog") != std::string::npos ||
                         (r.abort_reason.find("SIGTERM during ") != std::string::npos &&
                          r.abort_reason.find("during shutdown") == std::string::npos);
    if (r.waiting_in.empty() && !gave_up) return "";
    waiting_anywhere.insert(r.host);
  }
  if (waiting_anywhere.size() < 2) return "";
  const auto host_of = [&](int rank) { return a.ranks[static_cast<size_t>(rank)].host; };
  std::string home = t.launcher.host;
  if (home.empty() && !a.ranks.empty()) home = a.ranks.front().host;
  std::set<std::string> cut;
  for (const RankState& r : a.ranks)
    if (r.host != home) cut.insert(r.host);
  const StuckOp* example = nullptr;
  for (const StuckOp& st : a.stuck) {
    std::set<int> inside(st.entered.begin(), st.entered.end());
    for (int r : st.completed) inside.erase(r);
    std::set<int> awaited(st.never.begin(), st.never.end());
    awaited.insert(st.completed.begin(), st.completed.end());
    if (awaited.empty())  // members unknown to the trail (the world): every rank that did not enter
      for (const RankState& r : a.ranks)
        if (!std::count(st.entered.begin(), st.entered.end(), r.rank)) awaited.insert(r.rank);
    std::set<std::string> waiting_hosts, awaited_hosts;
    for (int r : inside) waiting_hosts.insert(host_of(r));
    for (int r : awaited) awaited_hosts.insert(host_of(r));
    for (const std::string& h : waiting_hosts)
      if (awaited_hosts.count(h)) return "";  // waits inside one host: not the network's doing
    if (example == nullptr || (st.p2p && !st.completed.empty())) example = &st;
  }
  if (cut.empty()) return "";
  std::string names, ranks_all;
  for (const std::string& h : cut) {
    LostNode n{h, {}};
    for (const RankState& r : a.ranks)
      if (r.host == h) n.ranks.push_back(r.rank);
    names += (names.empty() ? "" : ", ") + h;
    ranks_all += (ranks_all.empty() ? "" : ", ") + ranks_text(n.ranks);
    a.lost_nodes.push_back(std::move(n));
  }
  std::string v = "node " + names + " was cut off from " + home +
                  (t.launcher.host.empty() ? " (rank 0's node)" : " (where the launcher ran)") + " with its ranks (" +
                  ranks_all + "): the ranks on both sides were alive and gave up waiting for each other";
  if (example != nullptr) {
    v += ", every op left open waiting for a message across nodes (" + example->op + " #" +
         std::to_string(example->seq) + " of " + example->label;
    if (example->p2p && !example->completed.empty()) {
      std::set<int> inside(example->entered.begin(), example->entered.end());
      for (int r : example->completed) inside.erase(r);
      v += ": rank(s) " + ranks_text(example->completed) + " completed their side, rank(s) " +
           ranks_text(std::vector<int>(inside.begin(), inside.end())) + " never got theirs";
    }
    v += ")";
  }
  v += ": the network between the nodes failed. ";
  return v;
}

}  // namespace

Analysis analyse(const RunTrails& t) {
  Analysis a;
  a.world = static_cast<int>(t.ranks.size());
  std::set<std::string> hosts;
  for (const RankTrail& r : t.ranks)
    if (r.has_log) hosts.insert(r.host);
  a.nodes = static_cast<int>(hosts.size());
  a.launcher_ended_by_supervisor = t.launcher.ended_by_supervisor;

  // Phases: completed non-communication slices, summed per rank and (kind, name).
  std::map<std::pair<std::string, std::string>, std::map<int, double>> phase_s;
  std::vector<std::pair<std::string, std::string>> phase_order;
  for (const RankTrail& r : t.ranks)
    for (const PhaseTotal& pt : r.phases) {
      const auto key = std::make_pair(pt.kind, pt.name);
      if (!phase_s.count(key)) phase_order.push_back(key);
      phase_s[key][r.rank] += pt.seconds;
    }
  for (const auto& key : phase_order) {
    PhaseStat p;
    p.kind = key.first;
    p.name = key.second;
    std::vector<double> v;
    for (const auto& [rank, s] : phase_s[key]) {
      v.push_back(s);
      if (p.slowest_rank < 0 || s > p.max_s) p.max_s = s, p.slowest_rank = rank;
    }
    p.ranks = static_cast<int>(v.size());
    p.min_s = *std::min_element(v.begin(), v.end());
    p.median_s = median(v);
    a.phases.push_back(p);
  }

  // Communication: per group, its seqs in order from the aggregates.
  for (size_t gi = 0; gi < t.groups.size(); ++gi) {
    const GroupAggregate& grp = t.groups[gi];
    std::vector<std::pair<int64_t, const SeqAggregate*>> seqs;
    for (const auto& [seq, agg] : grp.sparse)
      if (seq < 0 && agg.entered > 0) seqs.emplace_back(seq, &agg);
    for (size_t s = 0; s < grp.dense.size(); ++s)
      if (grp.dense[s].entered > 0) seqs.emplace_back(static_cast<int64_t>(s), &grp.dense[s]);
    for (const auto& [seq, agg] : grp.sparse)
      if (seq >= 0 && agg.entered > 0) seqs.emplace_back(seq, &agg);

    GroupSpread g;
    g.label = grp.label;
    std::vector<double> spreads;
    for (const auto& [seq, agg] : seqs) {
      if (agg->entered < 2) continue;
      const double sp = secs(agg->max_begin_ns - agg->min_begin_ns);
      spreads.push_back(sp);
      if (g.max_seq < 0 || sp > g.max_spread_s) g.max_spread_s = sp, g.max_seq = seq, g.last_rank = agg->last_rank;
    }
    g.ops = static_cast<int>(spreads.size());
    g.median_spread_s = median(spreads);
    a.groups.push_back(g);

    // Stuck: entered by someone, not completed by every member. Who entered and completed
    // comes from each member's presence in the group, only for these (few) seqs.
    for (const auto& [seq, agg] : seqs) {
      if (agg->completed == grp.members.size()) continue;
      StuckOp st;
      st.label = grp.label;
      st.seq = seq;
      st.op = agg->op < t.op_names.size() ? t.op_names[agg->op] : "?";
      st.p2p = agg->p2p;
      st.first_entry_ns = agg->min_begin_ns;
      for (int m : grp.members) {
        const auto& pres = t.ranks[static_cast<size_t>(m)].presence;
        auto it = std::lower_bound(pres.begin(), pres.end(), static_cast<int>(gi),
                                   [](const GroupPresence& p, int g) { return p.group < g; });
        if (it == pres.end() || it->group != static_cast<int>(gi) || !it->has(seq)) {
          st.never.push_back(m);
          continue;
        }
        st.entered.push_back(m);
        if (it->completed(seq)) st.completed.push_back(m);
      }
      a.stuck.push_back(std::move(st));
    }
  }
  // A p2p pair (send #n, recv #n) of one seq on two ranks is one entry of the aggregates, so a send
  // that completed eagerly with its recv never posted shows as stuck with the receiver in
  // never; a group whose members simply ran different numbers of ops shows the same way.

  bool watchdog_expired = false;
  int64_t first_sigterm_ns = -1;
  for (const RankTrail& r : t.ranks) {
    if (r.abort_reason.find("watchdog") != std::string::npos) watchdog_expired = true;
    if (r.abort_reason.find("SIGTERM") != std::string::npos && r.abort_ns >= 0 &&
        (first_sigterm_ns < 0 || r.abort_ns < first_sigterm_ns))
      first_sigterm_ns = r.abort_ns;
  }
  for (const RankTrail& r : t.ranks) {
    RankState s;
    s.rank = r.rank;
    s.host = r.host;
    s.pp = r.pp;
    s.tp = r.tp;
    s.abort_reason = r.abort_reason;
    s.last_event_ns = r.last_event_ns;
    s.last_event = r.last_event;
    if (!r.waiting_in.empty()) {
      s.waiting_in = r.waiting_in;
      s.waiting_s = secs(t.end_ns - r.waiting_begin_ns);
    }
    if (!r.has_heartbeat) {
      s.heartbeat = "none";
    } else {
      s.heartbeat_age_s = std::max(0.0, secs(t.end_ns - r.heartbeat_ns));
      // Ended by the launcher (no watchdog expired, yet ranks were SIGTERMed or ops were left
      // open): a rank that wrote no abort record and was not blocked in an op is the one that
      // died; one blocked in an op was waiting until the launcher ended it.
      const bool by_launcher = !watchdog_expired && (first_sigterm_ns >= 0 || !a.stuck.empty());
      const bool killed = by_launcher && r.abort_reason.empty() && s.waiting_in.empty();
      s.heartbeat = r.hb_stopped                                        ? "exited"
                    : (s.heartbeat_age_s > kHeartbeatDeadAfterS || killed) ? "dead"
                                                                          : "alive";
    }
    a.ranks.push_back(s);
    if (r.prompts_s > 0) {
      CommShare c;
      c.rank = r.rank;
      c.host = r.host;
      c.prompts_s = r.prompts_s;
      c.by_kind = r.prompts_comm_s;
      for (const auto& [kind, sec] : c.by_kind) c.comm_s += sec;
      a.comm.push_back(std::move(c));
    }
  }

  // Lost nodes (LostNode): only when the launcher ended a job spread over several hosts.
  if (!watchdog_expired && first_sigterm_ns >= 0) {
    std::map<std::string, std::vector<int>> by_host;
    std::vector<std::string> host_order;
    for (const RankTrail& r : t.ranks) {
      if (!r.has_log) continue;
      if (!by_host.count(r.host)) host_order.push_back(r.host);
      by_host[r.host].push_back(r.rank);
    }
    const auto sigtermed = [&](int rank) {
      return t.ranks[static_cast<size_t>(rank)].abort_reason.find("SIGTERM") != std::string::npos;
    };
    for (const std::string& host : host_order) {
      if (host == "?" || by_host.size() < 2) continue;
      bool silent = true, others_sigtermed = false;
      for (int rank : by_host[host]) {
        const RankTrail& r = t.ranks[static_cast<size_t>(rank)];
        silent = silent && r.has_heartbeat && !r.hb_stopped && r.abort_reason.empty();
      }
      for (const auto& [other, ranks] : by_host)
        if (other != host)
          for (int rank : ranks) others_sigtermed = others_sigtermed || sigtermed(rank);
      if (!silent || !others_sigtermed) continue;
      a.lost_nodes.push_back({host, by_host[host]});
      for (int rank : by_host[host]) a.ranks[static_cast<size_t>(rank)].heartbeat = "dead";
    }
  }
  std::string lost;
  for (const LostNode& n : a.lost_nodes)
    lost += "node " + n.host + " was lost with all its ranks (" + ranks_text(n.ranks) +
            "): none of them wrote an abort record or exited, while the launcher SIGTERMed the ranks "
            "elsewhere; the node, or every dayzero process on it, died. ";

  std::set<int> culprits;
  for (const StuckOp& st : a.stuck)
    for (int r : st.never)
      if (a.ranks[static_cast<size_t>(r)].waiting_in.empty() && !st.entered.empty() &&
          a.ranks[static_cast<size_t>(r)].heartbeat != "exited")
        culprits.insert(r);
  a.culprits.assign(culprits.begin(), culprits.end());
  if (a.lost_nodes.empty()) lost = cut_off_nodes(t, a);

  // The verdict.
  if (a.stuck.empty()) {
    a.verdict = lost + "no hang: every op that a group's ranks entered completed on all of them." + launcher_note(t);
    return a;
  }
  std::string v;
  for (int c : a.culprits) {
    const RankState& rs = a.ranks[static_cast<size_t>(c)];
    const RankTrail& tr = t.ranks[static_cast<size_t>(c)];
    // The op it is missing from: preferably on the group of its own last communication.
    const std::string& last_label = tr.last_comm_group;
    const StuckOp* main = nullptr;
    std::vector<const StuckOp*> also;
    for (const StuckOp& st : a.stuck)
      if (std::find(st.never.begin(), st.never.end(), c) != st.never.end() && !st.entered.empty()) {
        if (main == nullptr || (st.label == last_label && main->label != last_label)) {
          if (main != nullptr) also.push_back(main);
          main = &st;
        } else {
          also.push_back(&st);
        }
      }
    int64_t others_stopped = -1;
    for (const RankState& o : a.ranks)
      if (o.rank != c) others_stopped = std::max(others_stopped, o.last_event_ns);
    const std::string missing = !main->p2p ? main->op : main->op == "send" ? "the recv matching send" : "the send matching recv";
    v += who(rs) + " never entered " + missing + " #" + std::to_string(main->seq) + " of " + main->label +
         ", which rank(s) " + ranks_text(main->entered) + (main->p2p ? " entered" : " entered and waited in");
    if (!also.empty()) {
      v += " (nor ";
      for (size_t i = 0; i < also.size(); ++i)
        v += (i ? ", " : "") + also[i]->op + " #" + std::to_string(also[i]->seq) + " of " + also[i]->label;
      v += ")";
    }
    v += "; its last event was the " + rs.last_event;
    if (others_stopped >= 0 && rs.last_event_ns >= 0)
      v += ", " + fmt(secs(others_stopped - rs.last_event_ns), "%.1f") + " s before the others stopped";
    if (rs.heartbeat == "alive")
      v += ". It was alive and stuck: its heartbeat was still beating " + fmt(rs.heartbeat_age_s, "%.1f") +
           " s before the end";
    else if (rs.heartbeat == "dead")
      v += ". It is dead (or frozen): its heartbeat stopped " + fmt(rs.heartbeat_age_s, "%.1f") +
           " s before the end and it left no abort record";
    else
      v += ". Its heartbeat is " + rs.heartbeat;
    v += ". ";
  }
  if (a.culprits.empty() && a.lost_nodes.empty())
    v = "every stuck op's missing ranks are themselves waiting in another op (a cycle, or ops issued in "
        "different orders): see the stuck ops above. ";
  a.verdict = lost + v;
  a.verdict = a.verdict.substr(0, a.verdict.size() - 1) + launcher_note(t);
  return a;
}

nlohmann::ordered_json to_json(const Analysis& a) {
  nlohmann::ordered_json j;
  j["world_size"] = a.world;
  j["nodes"] = a.nodes;
  j["phases"] = nlohmann::ordered_json::array();
  for (const PhaseStat& p : a.phases)
    j["phases"].push_back({{"kind", p.kind}, {"name", p.name}, {"ranks", p.ranks}, {"min_s", p.min_s},
                           {"median_s", p.median_s}, {"max_s", p.max_s}, {"slowest_rank", p.slowest_rank}});
  j["groups"] = nlohmann::ordered_json::array();
  for (const GroupSpread& g : a.groups)
    j["groups"].push_back({{"label", g.label}, {"ops", g.ops}, {"median_spread_s", g.median_spread_s},
                           {"max_spread_s", g.max_spread_s}, {"max_seq", g.max_seq}, {"last_rank", g.last_rank}});
  j["stuck"] = nlohmann::ordered_json::array();
  for (const StuckOp& s : a.stuck)
    j["stuck"].push_back({{"label", s.label}, {"op", s.op}, {"seq", s.seq}, {"entered", s.entered},
                          {"completed", s.completed}, {"never", s.never}});
  j["ranks"] = nlohmann::ordered_json::array();
  for (const RankState& r : a.ranks)
    j["ranks"].push_back({{"rank", r.rank}, {"host", r.host}, {"pp", r.pp}, {"tp", r.tp},
                          {"last_event", r.last_event}, {"waiting_in", r.waiting_in}, {"waiting_s", r.waiting_s},
                          {"heartbeat", r.heartbeat}, {"heartbeat_age_s", r.heartbeat_age_s},
                          {"abort_reason", r.abort_reason}});
  j["comm_share"] = nlohmann::ordered_json::array();
  for (const CommShare& c : a.comm) {
    nlohmann::ordered_json k = nlohmann::ordered_json::object();
    for (const auto& [kind, sec] : c.by_kind) k[kind] = sec;
    j["comm_share"].push_back({{"rank", c.rank}, {"host", c.host}, {"prompts_s", c.prompts_s}, {"comm_s", c.comm_s},
                               {"share", c.prompts_s > 0 ? c.comm_s / c.prompts_s : 0.0}, {"by_kind", k}});
  }
  j["lost_nodes"] = nlohmann::ordered_json::array();
  for (const LostNode& n : a.lost_nodes) j["lost_nodes"].push_back({{"host", n.host}, {"ranks", n.ranks}});
  j["culprits"] = a.culprits;
  j["launcher_ended_by_supervisor"] = a.launcher_ended_by_supervisor;
  j["verdict"] = a.verdict;
  return j;
}

std::string to_text(const Analysis& a) {
  std::string o = std::to_string(a.world) + " rank(s) on " + std::to_string(a.nodes) + " node(s)\n";
  o += "phases (seconds over ranks: min / median / max, slowest rank):\n";
  for (const PhaseStat& p : a.phases)
    o += "  " + p.kind + " " + p.name + ": " + fmt(p.min_s) + " / " + fmt(p.median_s) + " / " + fmt(p.max_s) +
         ", rank " + std::to_string(p.slowest_rank) + " (" + std::to_string(p.ranks) + " rank(s))\n";
  o += "collective groups (arrival spread, seconds: median / max at seq, last to arrive):\n";
  for (const GroupSpread& g : a.groups)
    o += "  " + g.label + ": " + std::to_string(g.ops) + " op(s), " + fmt(g.median_spread_s, "%.6f") + " / " +
         fmt(g.max_spread_s, "%.6f") + (g.max_seq >= 0 ? " at #" + std::to_string(g.max_seq) + ", rank " +
                                                            std::to_string(g.last_rank)
                                                      : std::string()) +
         "\n";
  if (!a.comm.empty()) {
    o += "communication share of phase prompts (seconds in collectives and p2p / the phase, by group kind):\n";
    for (const CommShare& c : a.comm) {
      o += "  rank " + std::to_string(c.rank) + " (node " + c.host + "): " + fmt(c.comm_s) + " / " +
           fmt(c.prompts_s) + " s (" + fmt(100.0 * c.comm_s / c.prompts_s, "%.1f") + "%)";
      for (size_t i = 0; i < c.by_kind.size(); ++i)
        o += (i ? ", " : ": ") + c.by_kind[i].first + " " + fmt(c.by_kind[i].second);
      o += "\n";
    }
  }
  o += "ops not completed by every rank of their group:\n";
  if (a.stuck.empty()) o += "  none\n";
  for (const StuckOp& s : a.stuck)
    o += "  " + s.op + " #" + std::to_string(s.seq) + " of " + s.label + ": entered " + ranks_text(s.entered) +
         "; completed " + ranks_text(s.completed) + "; never arrived " + ranks_text(s.never) + "\n";
  o += "ranks at the end:\n";
  for (const RankState& r : a.ranks) {
    o += "  " + who(r) + ": last event " + (r.last_event.empty() ? "none" : r.last_event);
    if (!r.waiting_in.empty()) o += "; waiting in " + r.waiting_in + " for " + fmt(r.waiting_s, "%.1f") + " s";
    o += "; heartbeat " + r.heartbeat;
    if (r.heartbeat_age_s >= 0) o += " (" + fmt(r.heartbeat_age_s, "%.1f") + " s before the end)";
    o += "\n";
  }
  for (const LostNode& n : a.lost_nodes) o += "node lost: " + n.host + ", ranks " + ranks_text(n.ranks) + "\n";
  o += "verdict: " + a.verdict + "\n";
  return o;
}

}  // namespace dayzero::diag
