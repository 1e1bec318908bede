// A peer that stops answering while alive: under tp2 x pp2, debug.stall makes rank 2 sleep
// (its heartbeat still beating) before one op, in prefill, in decode, and before a pipeline
// recv. The job must end non-zero within collective_timeout_s + 15 s, and a hang report of a
// waiting rank must name rank 2 as not inside the op and show, from rank 2's heartbeat, the
// op it stopped before. `dayzero timeline` on the files left behind must reach the same
// verdict, and find no hang in a healthy run (the negative control). Last, a rank SIGKILLed
// in decode (stalled first, so that the kill lands mid-decode on a model this small) ends
// the job at once with mpirun's 137, and the timeline names it dead, not stuck. With the event
// log off the stalled job still ends and its hang report carries the flight-recorder ring; a
// stall before the communicator set-up ends the job too; dump.timeline: phases leaves no op
// rows in /timeline.
#include <nlohmann/json.hpp>

#include <signal.h>

#include <future>
#include <set>
#include <thread>

#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kWorld = 4;
constexpr double kTimeoutS = 3;
constexpr double kEndWithinS = kTimeoutS + 15;

const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("hang-model");
    make_model_from_yaml(golden_sizes("llama"), d / "model");
    return d / "model";
  }();
  return dir;
}

struct Stalled {
  Outcome outcome;
  double seconds = 0;
  fs::path run_dir;
};

// Runs the tiny llama under tp2 x pp2 with rank 2 stalled before `before`; `dump` and
// `watchdog` are extra keys of those maps ("event_log: off").
Stalled run_stalled(const std::string& name, const std::string& before, double timeout_s = kTimeoutS,
                    const std::string& dump = "", const std::string& watchdog = "") {
  const std::string debug = before.empty() ? "" : "debug: {stall: {rank: 2, before: \"" + before + "\"}}\n";
  const fs::path dir = scratch_dir("hang-" + name);
  write_file(dir / "run.yaml",
             "model: {path: " + model_dir().string() + "}\n"
             "parallel: {pp: 2, tp: 2}\n"
             "prompts:\n  - {id: a, tokens: [1, 5, 9, 13]}\n"
             "generate: {max_new_tokens: 16, stop_at_eos: false}\n"
             "dump: {dir: unused" + (dump.empty() ? "" : ", " + dump) + "}\n"
             "watchdog: {collective_timeout_s: " + std::to_string(timeout_s) + (watchdog.empty() ? "" : ", " + watchdog) + "}\n" +
             debug);
  Stalled s;
  s.run_dir = dir / "run";
  const auto t0 = std::chrono::steady_clock::now();
  // The outer limit only keeps a broken build from blocking the suite.
  s.outcome = run_shell("timeout -k 5 60 mpiexec -n " + std::to_string(kWorld) + " --oversubscribe " + dayzero_bin() +
                        " run " + (dir / "run.yaml").string() + " --dump-dir " + s.run_dir.string());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

// The hang reports of the ranks that waited (not rank 2's own).
std::vector<json> waiter_reports(const fs::path& run_dir) {
  std::vector<json> out;
  for (int r = 0; r < kWorld; ++r) {
    if (r == 2) continue;
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.json", r);
    const fs::path p = run_dir / "hang" / name;
    if (fs::exists(p)) out.push_back(json::parse(read_file(p)));
  }
  return out;
}

// Some waiter's report names rank 2 as a suspect and shows rank 2 stalled before `op_text`.
void expect_rank2_named(const Stalled& s, const std::string& op_text) {
  EXPECT_NE(s.outcome.exit_code, 0) << s.outcome.output;
  EXPECT_NE(s.outcome.exit_code, 124) << "the job did not end by itself:\n" << s.outcome.output;
  EXPECT_LT(s.seconds, kEndWithinS) << s.outcome.output;
  const std::vector<json> reports = waiter_reports(s.run_dir);
  ASSERT_FALSE(reports.empty()) << "no hang report in " << s.run_dir << "\n" << s.outcome.output;
  bool named = false;
  for (const json& r : reports) {
    bool suspect = false;
    for (const auto& x : r["suspects"]) suspect |= x == 2;
    if (suspect && r["peers"][2].value("current", "") == "debug.stall before " + op_text) named = true;
  }
  EXPECT_TRUE(named) << "no report names rank 2 stalled before " << op_text << "; first: " << reports[0].dump(2);
  EXPECT_NE(s.outcome.output.find("not inside it, per their heartbeats: rank(s) 2"), std::string::npos)
      << s.outcome.output;
}

// Rank 3, rank 2's tp peer, waited inside the stalled collective itself.
void expect_rank3_inside(const Stalled& s, const std::string& op, int64_t seq) {
  const fs::path p = s.run_dir / "hang" / "rank-00003.json";
  ASSERT_TRUE(fs::exists(p)) << s.outcome.output;
  const json r = json::parse(read_file(p));
  ASSERT_TRUE(r["op"].is_object()) << r.dump(2);
  EXPECT_EQ(r["op"]["op"], op);
  EXPECT_EQ(r["op"]["label"], "tp@pp1.dp0");
  EXPECT_EQ(r["op"]["seq"], seq);
  EXPECT_GE(r["op"]["waited_s"].get<double>(), kTimeoutS * 0.99);
  EXPECT_EQ(r["suspects"], json::array({2}));
  // Its last events end with the open collective it waited in.
  ASSERT_TRUE(r["last_events"].is_array() && !r["last_events"].empty()) << r.dump(2);
  // The whole ring, which at the default 4096 still holds every event of this short run.
  EXPECT_EQ(r["last_events"].size(), r["events_total"].get<size_t>());
  const json& last = r["last_events"].back();
  EXPECT_EQ(last["name"], op);
  EXPECT_EQ(last["seq"], seq);
  EXPECT_EQ(last["t_end_ns"], -1) << last.dump();
}

// `dayzero timeline RUN --json` of a run folder, parsed.
json timeline_of(const fs::path& run_dir, const std::string& extra = "") {
  const Outcome o = run_dayzero("timeline " + run_dir.string() + " --json " + extra + " 2>/dev/null");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  return json::parse(o.output, nullptr, false);
}

// The timeline names rank 2, alive, as the rank that never entered `op` (as the verdict
// words it), which the ranks in `entered` did.
void expect_timeline_verdict(const Stalled& s, const std::string& op, const std::string& label, int64_t seq,
                             const std::string& verdict_op) {
  const json t = timeline_of(s.run_dir);
  ASSERT_TRUE(t.is_object()) << "timeline --json did not print JSON";
  EXPECT_EQ(t["culprits"], json::array({2})) << t.dump(2);
  bool found = false;
  for (const auto& st : t["stuck"])
    if (st["label"] == label && st["seq"] == seq && st["op"] == op) {
      found = true;
      EXPECT_EQ(st["never"], json::array({2})) << st.dump();
      EXPECT_EQ(st["completed"].size() + 1, st["entered"].size() + (op == "send" ? 1 : 0)) << st.dump();
    }
  EXPECT_TRUE(found) << op << " #" << seq << " of " << label << " not among the stuck ops: " << t["stuck"].dump();
  const std::string v = t["verdict"];
  EXPECT_EQ(v.rfind("rank 2 (node ", 0), 0u) << v;
  EXPECT_NE(v.find(", pp 1, tp 0) never entered " + verdict_op + " #" + std::to_string(seq) + " of " + label),
            std::string::npos)
      << v;
  EXPECT_NE(v.find("alive and stuck"), std::string::npos) << v;
  EXPECT_EQ(t["ranks"][2]["heartbeat"], "alive") << t["ranks"][2].dump();
  EXPECT_EQ(t["ranks"][2]["waiting_in"], "") << t["ranks"][2].dump();
}

// Rows of every rank file's /timeline: {collective or p2p rows, phase rows}.
std::pair<int64_t, int64_t> timeline_rows(const fs::path& run_dir) {
  int64_t ops = 0, phases = 0;
  for (int r = 0; r < kWorld; ++r) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.h5", r);
    auto reader = dump::DumpReader::open((run_dir / name).string());
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    if (!reader.ok()) continue;
    auto rows = reader->read_timeline();
    EXPECT_TRUE(rows.ok()) << rows.status().message();
    if (!rows.ok()) continue;
    for (const auto& e : *rows) {
      ops += e.kind == "collective" || e.kind == "p2p";
      phases += e.kind == "phase";
    }
  }
  return {ops, phases};
}

TEST(Hang, HealthyRunHasNoHangInItsTimeline) {
  const Stalled s = run_stalled("healthy", "");
  ASSERT_EQ(s.outcome.exit_code, 0) << s.outcome.output;
  EXPECT_FALSE(fs::exists(s.run_dir / "hang")) << "a hang report after a healthy run";
  const json t = timeline_of(s.run_dir);
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["culprits"], json::array()) << t.dump(2);
  EXPECT_EQ(t["stuck"], json::array()) << t["stuck"].dump();
  EXPECT_EQ(t["verdict"].get<std::string>().rfind("no hang", 0), 0u) << t["verdict"];
  for (const auto& r : t["ranks"]) EXPECT_EQ(r["heartbeat"], "exited") << r.dump();
  // The negative control of TimelinePhasesKeepsNoOpRows: by default /timeline holds the ops.
  const auto [ops, phases] = timeline_rows(s.run_dir);
  EXPECT_GT(ops, 100) << "ops in /timeline of a full run";
  EXPECT_GT(phases, 0);
}

TEST(Hang, TimelinePhasesKeepsNoOpRows) {
  const Stalled s = run_stalled("phases", "", kTimeoutS, "timeline: phases");
  ASSERT_EQ(s.outcome.exit_code, 0) << s.outcome.output;
  const auto [ops, phases] = timeline_rows(s.run_dir);
  EXPECT_EQ(ops, 0) << "collective or p2p rows in /timeline under dump.timeline: phases";
  EXPECT_GE(phases, 9 * kWorld) << "phase rows";  // config .. prompts on every rank
  // The event log still has every op, so the timeline reader sees a healthy run.
  const json t = timeline_of(s.run_dir);
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["stuck"], json::array()) << t["stuck"].dump();
}

// dump.event_log: off. The job still ends by the op deadline; rank 3's report holds the whole
// ring (8 events here, fewer than it began), oldest first, the stalled all_reduce's begin last
// and open, and the placement the event log's meta line would have carried. No events/ folder,
// so `dayzero timeline` has nothing to read.
TEST(Hang, StallWithEventLogOffReportsTheRing) {
  constexpr int kRing = 8;
  const Stalled s = run_stalled("no-log", "tp all_reduce #1", kTimeoutS, "event_log: off",
                                "ring_events: " + std::to_string(kRing));
  expect_rank2_named(s, "all_reduce #1 of tp@pp1.dp0");
  EXPECT_FALSE(fs::exists(s.run_dir / "events")) << "events/ written with dump.event_log: off";
  const fs::path p = s.run_dir / "hang" / "rank-00003.json";
  ASSERT_TRUE(fs::exists(p)) << s.outcome.output;
  const json r = json::parse(read_file(p));
  const json& last = r["last_events"];
  ASSERT_TRUE(last.is_array());
  ASSERT_EQ(last.size(), static_cast<size_t>(kRing)) << r.dump(2);
  EXPECT_GT(r["events_total"].get<int64_t>(), kRing) << r.dump(2);
  for (size_t i = 1; i < last.size(); ++i)
    EXPECT_LE(last[i - 1]["t_begin_ns"].get<int64_t>(), last[i]["t_begin_ns"].get<int64_t>()) << "at " << i;
  EXPECT_EQ(last.back()["name"], "all_reduce");
  EXPECT_EQ(last.back()["group"], "tp@pp1.dp0");
  EXPECT_EQ(last.back()["seq"], 1);
  EXPECT_EQ(last.back()["t_end_ns"], -1);
  ASSERT_TRUE(r["placement"].is_object()) << r.dump(2);
  EXPECT_EQ(r["placement"]["rank"], 3);
  EXPECT_EQ(r["placement"]["pp"], 1);
  EXPECT_EQ(r["placement"]["tp"], 1);
  EXPECT_TRUE(r["placement"].contains("clock_offset_ns"));

  const Outcome o = run_dayzero("timeline " + s.run_dir.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("no readable event log under events/"), std::string::npos) << o.output;
}

// A peer that never arrives at the communicator set-up (before any run folder exists) ends the
// job within the op deadline, naming the set-up op.
TEST(Hang, StallBeforeGroupSetupEndsTheJob) {
  const Stalled s = run_stalled("setup", "setup cart_sub #1");
  EXPECT_NE(s.outcome.exit_code, 0) << s.outcome.output;
  EXPECT_NE(s.outcome.exit_code, 124) << "the job did not end by itself:\n" << s.outcome.output;
  EXPECT_LT(s.seconds, kEndWithinS) << s.outcome.output;
  EXPECT_NE(s.outcome.output.find("debug.stall: rank 2 stalls before cart_sub #1 of world.setup"), std::string::npos)
      << s.outcome.output;
  EXPECT_NE(s.outcome.output.find("watchdog: cart_sub #1 of world.setup did not finish within 3 s"), std::string::npos)
      << s.outcome.output;
}

TEST(Hang, StallInPrefillAllReduceEndsTheJobAndIsReported) {
  const Stalled s = run_stalled("prefill", "tp all_reduce #1");
  expect_rank2_named(s, "all_reduce #1 of tp@pp1.dp0");
  expect_rank3_inside(s, "all_reduce", 1);
  expect_timeline_verdict(s, "all_reduce", "tp@pp1.dp0", 1, "all_reduce");
}

// Under pp1 each decode step is two all_reduces and one all_gather of tp: seq 40 is the
// second all_reduce of the 13th step after prefill.
TEST(Hang, StallInDecodeAllReduceEndsTheJobAndIsReported) {
  const Stalled s = run_stalled("decode", "tp all_reduce #40");
  expect_rank2_named(s, "all_reduce #40 of tp@pp1.dp0");
  expect_rank3_inside(s, "all_reduce", 40);
  expect_timeline_verdict(s, "all_reduce", "tp@pp1.dp0", 40, "all_reduce");

  // The Chrome trace of the same folder: valid JSON, one named track per rank.
  const fs::path trace = s.run_dir / "trace.json";
  (void)timeline_of(s.run_dir, "--chrome-trace " + trace.string());
  const json tr = json::parse(read_file(trace), nullptr, false);
  ASSERT_TRUE(tr.is_object() && tr["traceEvents"].is_array()) << "the Chrome trace does not parse";
  std::set<int> named, with_slices;
  for (const auto& e : tr["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      EXPECT_TRUE(named.insert(e["tid"].get<int>()).second);
    }
    if (e["ph"] == "X") with_slices.insert(e["tid"].get<int>());
  }
  EXPECT_EQ(named, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(with_slices, (std::set<int>{0, 1, 2, 3}));
}

// Stage 0 sends the hidden state of each step to stage 1 (pp seq 0, 2, 4, ...; broadcasts of
// the new token in between): rank 2 stops before the recv of the second decode step.
TEST(Hang, StallBeforePipelineRecvEndsTheJobAndIsReported) {
  const Stalled s = run_stalled("pp-recv", "pp recv #4");
  expect_rank2_named(s, "recv #4 of pp@dp0.tp0 from 0");
  // Rank 0's send is small enough to complete without its recv; rank 2 never posted it.
  expect_timeline_verdict(s, "send", "pp@dp0.tp0", 4, "the recv matching send");
}

TEST(Hang, KilledRankEndsTheJobAndTheTimelineNamesItDead) {
  // The watchdog's timeout is far away: what must end the job is the launcher seeing the kill.
  constexpr double kLongTimeoutS = 60;
  const fs::path live = scratch_dir("hang-killed") / "run" / "live" / "rank-00002.json";
  auto job = std::async(std::launch::async, [&] { return run_stalled("killed", "tp all_reduce #40", kLongTimeoutS); });
  // scratch_dir above cleared any heartbeat of an earlier run (whose pid must not be killed)
  // before the job starts; wait for rank 2's stall.
  int64_t pid = -1;
  for (int i = 0; i < 300 && pid < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const json hb = json::parse(read_file(live), nullptr, false);
    if (hb.is_object() && hb.value("current", "").rfind("debug.stall", 0) == 0) pid = hb.value("pid", int64_t{-1});
  }
  ASSERT_GT(pid, 0) << "rank 2 never reported its stall in " << live;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a beat or two while stalled
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  const Stalled s = job.get();
  const double after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(s.outcome.exit_code, 137) << s.outcome.output;
  EXPECT_LT(after_kill, 15.0) << "the job went on " << after_kill << " s after the kill\n" << s.outcome.output;

  const json t = timeline_of(s.run_dir);
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(t["culprits"], json::array({2})) << t.dump(2);
  EXPECT_EQ(t["ranks"][2]["heartbeat"], "dead") << t["ranks"][2].dump();
  for (int r : {0, 1, 3}) EXPECT_EQ(t["ranks"][r]["heartbeat"], "alive") << t["ranks"][r].dump();
  const std::string v = t["verdict"];
  EXPECT_NE(v.find("rank 2 (node "), std::string::npos) << v;
  EXPECT_NE(v.find("It is dead"), std::string::npos) << v;
  // The survivors, SIGTERMed by mpirun, wrote out their rings too.
  int with_ring = 0;
  for (const json& r : waiter_reports(s.run_dir))
    if (r.value("reason", "").find("SIGTERM") != std::string::npos && !r["last_events"].empty() &&
        r["events_total"].get<int64_t>() >= static_cast<int64_t>(r["last_events"].size()))
      ++with_ring;
  EXPECT_GT(with_ring, 0) << "no survivor's hang report holds its ring after SIGTERM";
}

}  // namespace
}  // namespace dayzero::e2e
