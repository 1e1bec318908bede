// dayzero across two "nodes" of this machine (tests/multinode/testbed.sh: network and UTS
// namespaces named node0 and node1, 2 slots each, joined by a bridge; mpirun on node0 reaches
// node1 through an rsh agent, TCP only). A tp2 x pp2 job matches the 1-rank run through
// `dayzero compare`; the ranks see two hosts, the plan keeps each tp group on one node and
// puts the stages on different nodes, and the node split gives local ranks 0, 1 on each; a
// job launched round-robin is refused; killing node1's ranks, or everything on node1, ends
// the job within seconds and `dayzero timeline` names node1 lost with ranks 2 and 3.
// A node whose network link goes down (testbed.sh cut) mid-load, mid-prefill or mid-decode:
// through launch/dayzero-launch the job ends within collective_timeout_s + 30 s with node0's
// hang reports on disk, and `dayzero timeline` names node1 cut off with ranks 2 and 3; with
// Open MPI's keepalive switched off, dayzero-launch's supervisor ends mpirun itself (exit 3).
// The bed adds nothing to the host's namespace and leaves no namespace behind. Skips with the
// reason where namespaces cannot be made, except under CI=true (fails there).
#include <nlohmann/json.hpp>

#include <future>
#include <set>
#include <thread>

#include "../e2e/compare_util.h"
#include "../e2e/e2e_util.h"
#include "dump/dump_reader.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kWorld = 4;
constexpr int kLayers = 4;
// The partition tolerance of the f32 preset (tests/e2e/compare_test.cpp; measured there
// <= 7.5e-7 between 1 rank and tp2 x pp2 on one host).
constexpr double kF32RelL2 = 4e-6;
// A healthy job here takes a few seconds (TCP between namespaces, 4 ranks on 2 cores); the
// limit only keeps a broken build from blocking the suite.
constexpr int kJobLimitS = 90;
// After the kill: mpirun reacts within seconds (measured 1.2-3.9 s on 2 busy cores); the same
// bound as the single-host kill of tests/e2e/hang_test.cpp.
constexpr double kEndAfterKillS = 15;

const fs::path kTestbed = fs::path(DAYZERO_SOURCE_DIR) / "tests" / "multinode" / "testbed.sh";

fs::path bed_dir() { return fs::path(DAYZERO_BINARY_DIR) / "multinode-bed"; }

// The bed, made once for the whole binary and removed at its end (the ctest cleanup fixture
// multinode_bed_down removes it too when this process dies).
// The host namespace's interfaces and addresses, one per line.
std::string host_interfaces() { return run_shell("ip -o link show | cut -d' ' -f2; ip -o addr show").output; }

// The network namespaces whose names start with the bed's tag (bed.env's TAG).
std::string bed_namespaces(const std::string& tag) {
  return run_shell("ip netns list | cut -d' ' -f1 | grep -- '^" + tag + "-' | sort").output;
}

class Bed : public ::testing::Environment {
 public:
  static bool up;
  static std::string why, tag, host_before;
  void SetUp() override {
    fs::create_directories(bed_dir());
    host_before = host_interfaces();
    const Outcome o = run_shell("bash " + kTestbed.string() + " up " + bed_dir().string() + " 2 2");
    up = o.exit_code == 0;
    if (!up) why = "the multi-node test bed could not be made (exit " + std::to_string(o.exit_code) + "): " + o.output;
    tag = run_shell(". " + (bed_dir() / "bed.env").string() + " 2>/dev/null && printf %s \"$TAG\"").output;
  }
  void TearDown() override {
    const Outcome o = run_shell("bash " + kTestbed.string() + " down " + bed_dir().string());
    if (!up) return;
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(bed_namespaces(tag), "") << "namespaces left after testbed.sh down";
    EXPECT_EQ(host_interfaces(), host_before) << "the host's interfaces changed";
  }
};
bool Bed::up = false;
std::string Bed::why, Bed::tag, Bed::host_before;
::testing::Environment* const bed_env = ::testing::AddGlobalTestEnvironment(new Bed);

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

class Multinode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Bed::up) return;
    if (under_ci()) FAIL() << "CI=true: " << Bed::why;
    GTEST_SKIP() << Bed::why;
  }
};

// A 4-layer f32 llama, made once (the host's filesystem is every node's).
const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("multinode-model");
    write_file(d / "sizes.yaml", "family: llama\nn_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) +
                                     "\nn_head: 4\nn_head_kv: 2\nn_ff: 128\nseed: 23\n");
    make_model_from_yaml(d / "sizes.yaml", d / "model", "--dtype float32");
    return d / "model";
  }();
  return dir;
}

std::string config(const std::string& extra, int max_new_tokens = 5) {
  return "model: {path: " + model_dir().string() + ", dtype: float32}\n" + extra +
         "prompts:\n"
         "  - {id: capital, text: \"The capital of France is\"}\n"
         "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n"
         "generate: {max_new_tokens: " + std::to_string(max_new_tokens) + ", stop_at_eos: false, top_k_record: 5}\n"
         "dump:\n  dir: unused\n  activations: {layers: all, phase: both, mode: full}\n";
}

struct Job {
  Outcome outcome;
  double seconds = 0;
  fs::path run_dir;
};

// `dayzero run` of `config_text` as 4 ranks over node0 and node1 (mpirun on node0; `mpirun_args`
// go before the program), the run folder under the build tree.
Job run_on_bed(const std::string& name, const std::string& config_text, const std::string& mpirun_args = "") {
  const fs::path dir = scratch_dir("multinode-" + name);
  write_file(dir / "run.yaml", config_text);
  Job j;
  j.run_dir = dir / "run";
  const auto t0 = std::chrono::steady_clock::now();
  j.outcome = run_shell("timeout -k 5 " + std::to_string(kJobLimitS) + " bash " + kTestbed.string() + " mpirun " +
                        bed_dir().string() + " -n " + std::to_string(kWorld) +
                        " -x OPENBLAS_NUM_THREADS -x DAYZERO_THREADS " + mpirun_args + " " + dayzero_bin() +
                        " run " + (dir / "run.yaml").string() + " --dump-dir " + j.run_dir.string());
  j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return j;
}

// The tp2 x pp2 job over the two nodes, run once for the tests that read it.
const Job& healthy_job() {
  static const Job j = run_on_bed("tp2-pp2", config("parallel: {pp: 2, tp: 2}\n"));
  return j;
}

// The event log's meta line of every rank, in rank order.
std::vector<json> meta_lines(const fs::path& run_dir) {
  std::vector<json> out;
  for (int r = 0; r < kWorld; ++r) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.jsonl", r);
    std::istringstream in(read_file(run_dir / "events" / name));
    json meta;
    for (std::string line; std::getline(in, line);) {
      const json e = json::parse(line, nullptr, false);
      if (e.is_object() && e.value("ev", "") == "meta") meta = e;
    }
    out.push_back(meta);
  }
  return out;
}

// The nodes, the fabric and their names as testbed.sh makes them; nothing in the host's own
// namespace (its bridge and veths live in the fabric namespace).
TEST_F(Multinode, BedIsTwoNamedNodesAndLeavesTheHostAlone) {
  ASSERT_FALSE(Bed::tag.empty());
  ASSERT_NE(Bed::host_before.find("lo:"), std::string::npos) << "ip -o link show did not list lo: " << Bed::host_before;
  EXPECT_EQ(bed_namespaces(Bed::tag), Bed::tag + "-fab\n" + Bed::tag + "-n0\n" + Bed::tag + "-n1\n");
  EXPECT_EQ(host_interfaces(), Bed::host_before) << "the bed changed the host's interfaces";
  for (int n : {0, 1}) {
    const std::string node = "node" + std::to_string(n);
    const Outcome o = run_shell("bash " + kTestbed.string() + " exec " + bed_dir().string() + " " + node +
                                " sh -c 'hostname; ip -o -4 addr show dev fab0 | cut -d\" \" -f7'");
    EXPECT_EQ(o.output, node + "\n10.77.0." + std::to_string(n + 1) + "/24\n") << o.output;
  }
  EXPECT_EQ(read_file(bed_dir() / "hostfile"), "node0 slots=2\nnode1 slots=2\n");
}

TEST_F(Multinode, Tp2Pp2OverTwoNodesMatchesOneRank) {
  const Job& j = healthy_job();
  ASSERT_EQ(j.outcome.exit_code, 0) << j.outcome.output;
  std::printf("tp2 x pp2 over 2 nodes: %.1f s\n", j.seconds);

  const fs::path dir = scratch_dir("multinode-one-rank");
  write_file(dir / "run.yaml", config(""));
  const Outcome one = run_dayzero("run " + (dir / "run.yaml").string() + " --dump-dir " + (dir / "run").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const Compared c = compare(dir / "run", j.run_dir, "--tolerance f32");
  ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
  ASSERT_FALSE(c.j.is_discarded()) << c.o.output;
  std::string where;
  const double w = worst_error(c.j, &where);
  std::printf("[agreement] one rank vs tp2 x pp2 over 2 nodes: worst relative L2 %.3g at %s\n", w, where.c_str());
  EXPECT_GT(w, 0.0) << "tp2 x pp2 sums in another order: bit-identical results mean nothing was compared";
  EXPECT_LT(w, kF32RelL2);

  // Negative control: the same compare sees a 1e-5 perturbation of one layer.
  write_file(dir / "perturbed.yaml", config("debug: {perturb: {point: layers.1.attn_out, scale: 1.00001}}\n"));
  const Outcome p =
      run_dayzero("run " + (dir / "perturbed.yaml").string() + " --dump-dir " + (dir / "perturbed").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const Compared bad = compare(dir / "perturbed", j.run_dir, "--tolerance f32");
  EXPECT_EQ(bad.o.exit_code, 1) << bad.o.output;
  std::printf("[negative control] perturbed one-rank run vs the 2-node run: compare exit %d\n", bad.o.exit_code);
}

// Wide expert parallelism across the two nodes: a tiny qwen3_moe (8 experts, top-2) under
// parallel {ep: 4}, one expert group over both nodes (two experts a rank), tokens dispatched and
// combined across the bridge, against one rank.
TEST_F(Multinode, WideEp4OverTwoNodesMatchesOneRank) {
  const fs::path dir = scratch_dir("multinode-wide-ep-model");
  write_file(dir / "sizes.yaml", "family: qwen3_moe\nn_vocab: 512\nn_embd: 64\nn_layer: 4\nn_head: 4\nn_head_kv: 2\n"
                                 "n_ff: 128\nhead_dim: 32\nn_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\nseed: 23\n");
  make_model_from_yaml(dir / "sizes.yaml", dir / "model", "--dtype float32");
  const auto moe = [&](const std::string& extra) {
    std::string c = config(extra);
    return c.replace(c.find(model_dir().string()), model_dir().string().size(), (dir / "model").string());
  };
  const Job j = run_on_bed("wide-ep4", moe("parallel: {ep: 4}\n"));
  ASSERT_EQ(j.outcome.exit_code, 0) << j.outcome.output;
  const json plan = json::parse(read_file(j.run_dir / "plan.json"));
  EXPECT_EQ(plan["ep"], 4);
  EXPECT_EQ(plan["nodes"].size(), 2u);
  EXPECT_GT(plan["expert_placement"]["inter_node_share"].get<double>(), 0.0);
  write_file(dir / "one.yaml", moe(""));
  const Outcome ref = run_dayzero("run " + (dir / "one.yaml").string() + " --dump-dir " + (dir / "one").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const Compared c = compare(dir / "one", j.run_dir, "--tolerance f32");
  ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
  std::string where;
  const double w = worst_error(c.j, &where);
  std::printf("[agreement] one rank vs wide ep4 over 2 nodes: worst relative L2 %.3g at %s\n", w, where.c_str());
  EXPECT_LT(w, kF32RelL2);
}

// Hosts as the ranks saw them (the HDF5 root attribute and the event log's meta line), against
// the plan: every tp group on one host, the two stages on different hosts.
TEST_F(Multinode, PlanKeepsEachTpGroupOnOneNode) {
  const Job& j = healthy_job();
  ASSERT_EQ(j.outcome.exit_code, 0) << j.outcome.output;
  const json plan = json::parse(read_file(j.run_dir / "plan.json"), nullptr, false);
  ASSERT_TRUE(plan.is_object()) << "plan.json does not parse";
  EXPECT_EQ(plan["tp"], 2);
  EXPECT_EQ(plan["pp"], 2);
  EXPECT_EQ(plan["nodes"], json::array({"node0", "node1"})) << "topology discovery saw other hosts";

  std::vector<std::string> host(kWorld);
  const std::vector<json> metas = meta_lines(j.run_dir);
  for (int r = 0; r < kWorld; ++r) {
    auto reader = dump::DumpReader::open(rank_dump(j.run_dir, r).string());
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    auto attrs = reader->root_attributes();
    ASSERT_TRUE(attrs.ok()) << attrs.status().message();
    host[r] = attrs->hostname;
    EXPECT_EQ(metas[r].value("host", ""), host[r]) << "rank " << r;
  }
  EXPECT_EQ(host, (std::vector<std::string>{"node0", "node0", "node1", "node1"}));

  std::map<std::pair<int, int>, std::set<std::string>> tp_hosts;  // (dp, pp) -> hosts of its tp group
  std::map<int, std::set<std::string>> stage_hosts;
  for (const json& rc : plan["ranks"]) {
    const int r = rc["rank"];
    ASSERT_LT(r, kWorld);
    EXPECT_EQ(plan["nodes"][rc["node"].get<int>()], host[r]) << "the plan places rank " << r << " elsewhere";
    tp_hosts[{rc["dp"].get<int>(), rc["pp"].get<int>()}].insert(host[r]);
    stage_hosts[rc["pp"].get<int>()].insert(host[r]);
  }
  ASSERT_EQ(tp_hosts.size(), 2u);
  for (const auto& [group, hosts] : tp_hosts)
    EXPECT_EQ(hosts.size(), 1u) << "tp group of pp " << group.second << " spans " << hosts.size() << " hosts";
  EXPECT_NE(*stage_hosts[0].begin(), *stage_hosts[1].begin()) << "both stages on one node";
}

// The node split (MPI_Comm_split_type shared memory) as the ranks recorded it.
TEST_F(Multinode, LocalRanksAreZeroAndOneOnEachNode) {
  const Job& j = healthy_job();
  ASSERT_EQ(j.outcome.exit_code, 0) << j.outcome.output;
  std::map<std::string, std::vector<int>> local;
  for (const json& m : meta_lines(j.run_dir)) {
    ASSERT_TRUE(m.contains("local_rank") && m.contains("local_size")) << m.dump();
    EXPECT_EQ(m["local_size"], 2) << m.dump();
    local[m["host"].get<std::string>()].push_back(m["local_rank"].get<int>());
  }
  EXPECT_EQ(local, (std::map<std::string, std::vector<int>>{{"node0", {0, 1}}, {"node1", {0, 1}}}));
}

// Round-robin placement puts ranks 0 and 1 on different nodes: the plan's tp group would span
// them, so the run refuses before loading anything.
TEST_F(Multinode, RoundRobinPlacementIsRefused) {
  const Job j = run_on_bed("map-by-node", config("parallel: {pp: 2, tp: 2}\n"), "--map-by node");
  EXPECT_EQ(j.outcome.exit_code, 2) << j.outcome.output;
  EXPECT_NE(j.outcome.output.find("topology: rank 1 runs on node1, but ranks must fill nodes in order, 2 per node"),
            std::string::npos)
      << j.outcome.output;
  EXPECT_FALSE(fs::exists(rank_dump(j.run_dir, 0))) << "a rank file after the refusal";
}

struct Killed {
  Job job;
  double after_kill_s = 0;
  json timeline;
};

// tp2 x pp2 with rank 2 (node1) stalled before a decode all_reduce, its tp peer rank 3 waiting
// inside it; once the stall shows in rank 2's heartbeat, `testbed.sh <how> BED node1` kills
// node1's dayzero processes (kill_ranks) or everything there, Open MPI's daemon included (kill).
Killed kill_node1(const std::string& name, const std::string& how) {
  Killed k;
  // The watchdog's timeout is far away: what must end the job is the launcher seeing the loss.
  const std::string cfg = config(
      "parallel: {pp: 2, tp: 2}\n"
      "watchdog: {collective_timeout_s: 60}\n"
      "debug: {stall: {rank: 2, before: \"tp all_reduce #40\"}}\n",
      16);
  const fs::path live = scratch_dir("multinode-" + name) / "run" / "live" / "rank-00002.json";
  auto job = std::async(std::launch::async, [&] { return run_on_bed(name, cfg); });
  bool stalled = false;
  for (int i = 0; i < 600 && !stalled; ++i) {
    if (job.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) break;  // ended early
    const json hb = json::parse(read_file(live), nullptr, false);
    stalled = hb.is_object() && hb.value("current", "").rfind("debug.stall", 0) == 0;
  }
  if (!stalled) {
    k.job = job.get();
    ADD_FAILURE() << "rank 2 never reported its stall in " << live << "\n" << k.job.outcome.output;
    return k;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a beat or two while stalled
  const auto killed_at = std::chrono::steady_clock::now();
  const Outcome kill = run_shell("bash " + kTestbed.string() + " " + how + " " + bed_dir().string() + " node1");
  EXPECT_EQ(kill.exit_code, 0) << kill.output;
  k.job = job.get();
  k.after_kill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf("%s: the job ended %.2f s after the kill, exit %d\n", name.c_str(), k.after_kill_s,
              k.job.outcome.exit_code);
  const Outcome t = run_dayzero("timeline " + k.job.run_dir.string() + " --json 2>/dev/null");
  EXPECT_EQ(t.exit_code, 0) << t.output;
  k.timeline = json::parse(t.output, nullptr, false);
  return k;
}

// The verdict names node1 lost with ranks 2 and 3 (both dead, node0's alive) and rank 2 as
// the rank its tp peer waited for.
void expect_node1_named(const Killed& k) {
  ASSERT_TRUE(k.timeline.is_object()) << "timeline --json did not print JSON";
  const json& t = k.timeline;
  EXPECT_EQ(t["nodes"], 2) << t.dump(2);
  EXPECT_EQ(t["lost_nodes"], json::parse(R"([{"host": "node1", "ranks": [2, 3]}])")) << t.dump(2);
  for (int r : {2, 3}) {
    EXPECT_EQ(t["ranks"][r]["host"], "node1");
    EXPECT_EQ(t["ranks"][r]["heartbeat"], "dead") << t["ranks"][r].dump();
  }
  for (int r : {0, 1}) {
    EXPECT_EQ(t["ranks"][r]["host"], "node0");
    EXPECT_EQ(t["ranks"][r]["heartbeat"], "alive") << t["ranks"][r].dump();
  }
  EXPECT_EQ(t["culprits"], json::array({2})) << t.dump(2);
  const std::string v = t["verdict"];
  EXPECT_EQ(v.rfind("node node1 was lost with all its ranks (2, 3)", 0), 0u) << v;
  // The op it is blamed for first is on the group of its last communication (a pipeline op
  // with two prompts decoding together); the stalled all_reduce is named as well.
  EXPECT_NE(v.find("rank 2 (node node1, pp 1, tp 0) never entered "), std::string::npos) << v;
  EXPECT_NE(v.find("all_reduce #40 of tp@pp1.dp0"), std::string::npos) << v;
  EXPECT_NE(v.find("It is dead"), std::string::npos) << v;
}

// Only the ranks die: node1's Open MPI daemon reports them, mpirun ends the job with 128 + 9.
TEST_F(Multinode, KillingOneNodesRanksEndsTheJobAndTheTimelineNamesTheNode) {
  const Killed k = kill_node1("kill-ranks", "kill-ranks");
  EXPECT_EQ(k.job.outcome.exit_code, 137) << k.job.outcome.output;
  EXPECT_LT(k.after_kill_s, kEndAfterKillS) << k.job.outcome.output;
  expect_node1_named(k);
}

// The whole node goes, its Open MPI daemon and the launch agent's session to it too. Which
// one mpirun notices first is a race inside Open MPI 4.1: the daemon's lost connection ("ORTE
// has lost communication with a remote daemon", exit 205) or the agent's exit ("ORTE was
// unable to reliably start one or more daemons", exit 9 here, the agent's signal). Either
// ends the job within seconds, saying so.
TEST_F(Multinode, LosingANodeEndsTheJobAndTheTimelineNamesTheNode) {
  const Killed k = kill_node1("kill-node", "kill");
  const std::string& out = k.job.outcome.output;
  EXPECT_NE(k.job.outcome.exit_code, 0) << out;
  EXPECT_NE(k.job.outcome.exit_code, 124) << "the job did not end by itself:\n" << out;
  EXPECT_LT(k.after_kill_s, kEndAfterKillS) << out;
  const bool lost = out.find("ORTE has lost communication with a remote daemon") != std::string::npos;
  const bool agent = out.find("ORTE was unable to reliably start one or more daemons") != std::string::npos;
  EXPECT_TRUE(lost || agent) << "mpirun did not say that node1's daemon went:\n" << out;
  if (lost) {
    EXPECT_EQ(k.job.outcome.exit_code, 205) << out;
  }
  expect_node1_named(k);
}

// ---- a lost link, through dayzero-launch ----------------------------------------------------

// The watchdog's collective timeout of these jobs, and what the issue of a lost node allows
// on top of it before the whole job must have ended.
constexpr double kCutTimeoutS = 10;
constexpr double kCutBoundS = kCutTimeoutS + 30;

struct CutJob {
  Job job;
  double after_cut_s = -1;  // from the cut to the launcher's exit; -1: never cut
  std::string phase_at_cut;  // rank 2's heartbeat phase when its link went down
  json timeline;
};

// `dayzero-launch` on node0 (mpirun across the bed as testbed.sh's mpirun, 2 ranks a node),
// the run folder under the build tree. `env` goes before it (e.g. an OMPI_MCA_ override).
std::string launch_command(const fs::path& dir, const std::string& launch_args, const std::string& env = "") {
  const std::string bed = bed_dir().string();
  static const std::string subnet =
      run_shell(". " + (bed_dir() / "bed.env").string() + " && printf %s \"$SUBNET\"").output;
  const std::string mpi_args = "--mca plm_rsh_agent " + bed + "/rsh-agent --mca btl self,tcp --mca btl_tcp_if_include " +
                               subnet + " --mca oob_tcp_if_include " + subnet + " --mca pml ob1";
  return "timeout -k 5 120 bash " + kTestbed.string() + " exec " + bed + " node0 env " + env + " python3 " +
         (fs::path(DAYZERO_SOURCE_DIR) / "launch" / "dayzero-launch").string() + " --hostfile " + bed +
         "/hostfile --cpu --ranks-per-node 2 --oversubscribe --threads 1 --no-probe --assume-shared-fs --run-dir " +
         (dir / "run").string() + " --bin " + dayzero_bin() + " --mpi-args '" + mpi_args + "' " + launch_args + " " +
         (dir / "run.yaml").string();
}

// tp2 x pp2 through dayzero-launch with rank 2 pausing `pause_s` before `before`; during the
// pause (seen in its heartbeat) node1's link is cut. The link is mended once the job has ended.
CutJob cut_node1_link(const std::string& name, const std::string& before, double pause_s, int max_new_tokens,
                      const std::string& launch_args = "", const std::string& env = "") {
  CutJob c;
  const fs::path dir = scratch_dir("multinode-" + name);
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", kCutTimeoutS);
  write_file(dir / "run.yaml",
             config(std::string("parallel: {pp: 2, tp: 2}\nwatchdog: {collective_timeout_s: ") + timeout +
                        "}\ndebug: {stall: {rank: 2, before: \"" + before + "\", seconds: " + std::to_string(pause_s) +
                        "}}\n",
                    max_new_tokens));
  c.job.run_dir = dir / "run";
  const fs::path live = c.job.run_dir / "live" / "rank-00002.json";
  const auto t0 = std::chrono::steady_clock::now();
  // Output to a file, not the pipe: node1's Open MPI daemon, cut off, outlives the launch (it
  // is killed below) and would hold a pipe open.
  const fs::path out = dir / "launch-output.txt";
  auto job = std::async(std::launch::async, [&] {
    Outcome o = run_shell(launch_command(dir, launch_args, env) + " > " + out.string() + " 2>&1");
    o.output = read_file(out);
    return o;
  });
  bool paused = false;
  for (int i = 0; i < 600 && !paused; ++i) {
    if (job.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) break;
    const json hb = json::parse(read_file(live), nullptr, false);
    paused = hb.is_object() && hb.value("current", "").rfind("debug.stall", 0) == 0;
    if (paused) c.phase_at_cut = hb.value("phase", "");
  }
  std::chrono::steady_clock::time_point cut_at{};
  if (paused) {
    const Outcome cut = run_shell("bash " + kTestbed.string() + " cut " + bed_dir().string() + " node1");
    cut_at = std::chrono::steady_clock::now();
    EXPECT_EQ(cut.exit_code, 0) << cut.output;
  }
  c.job.outcome = job.get();
  const auto end = std::chrono::steady_clock::now();
  c.job.seconds = std::chrono::duration<double>(end - t0).count();
  // Whatever the launch left on the nodes goes before the link comes back.
  for (const char* host : {"node0", "node1"})
    (void)run_shell("bash " + kTestbed.string() + " kill " + bed_dir().string() + " " + host);
  (void)run_shell("bash " + kTestbed.string() + " mend " + bed_dir().string() + " node1");
  if (!paused) {
    ADD_FAILURE() << "rank 2 never reported its pause in " << live << "\n" << c.job.outcome.output;
    return c;
  }
  c.after_cut_s = std::chrono::duration<double>(end - cut_at).count();
  std::printf("%s: cut in phase '%s'; the launch ended %.2f s after the cut, exit %d\n", name.c_str(),
              c.phase_at_cut.c_str(), c.after_cut_s, c.job.outcome.exit_code);
  const Outcome t = run_dayzero("timeline " + c.job.run_dir.string() + " --json 2>/dev/null");
  EXPECT_EQ(t.exit_code, 0) << t.output;
  c.timeline = json::parse(t.output, nullptr, false);
  return c;
}

// Ended, not hung, within the bound; node0's ranks wrote hang reports; the timeline names node1
// cut off with ranks 2 and 3, both alive until the end, and says why.
void expect_cut_off_node1(const CutJob& c) {
  const std::string& out = c.job.outcome.output;
  EXPECT_NE(c.job.outcome.exit_code, 0) << out;
  EXPECT_NE(c.job.outcome.exit_code, 124) << "the launch did not end by itself:\n" << out;
  EXPECT_LT(c.after_cut_s, kCutBoundS) << out;
  for (int r : {0, 1}) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.json", r);
    EXPECT_TRUE(fs::exists(c.job.run_dir / "hang" / name)) << "no hang report of rank " << r << "\n" << out;
  }
  ASSERT_TRUE(c.timeline.is_object()) << "timeline --json did not print JSON";
  const json& t = c.timeline;
  EXPECT_EQ(t["lost_nodes"], json::parse(R"([{"host": "node1", "ranks": [2, 3]}])")) << t.dump(2);
  const std::string v = t["verdict"];
  EXPECT_EQ(v.rfind("node node1 was cut off from node0 (where the launcher ran) with its ranks (2, 3)", 0), 0u) << v;
  EXPECT_NE(v.find("the network between the nodes failed"), std::string::npos) << v;
}

TEST_F(Multinode, LinkCutMidDecodeEndsTheLaunchAndTheTimelineNamesTheNode) {
  const CutJob c = cut_node1_link("cut-decode", "tp all_reduce #40", 3, 40);
  EXPECT_EQ(c.phase_at_cut.rfind("decode", 0), 0u) << c.phase_at_cut;
  expect_cut_off_node1(c);
}

TEST_F(Multinode, LinkCutDuringLoadingEndsTheLaunch) {
  // env agree #14 is the agreement after phase 'load' (the heartbeat's phase says so).
  const CutJob c = cut_node1_link("cut-load", "env agree #14", 3, 5);
  EXPECT_EQ(c.phase_at_cut, "load");
  expect_cut_off_node1(c);
}

TEST_F(Multinode, LinkCutDuringPrefillEndsTheLaunch) {
  const CutJob c = cut_node1_link("cut-prefill", "pp recv #0", 3, 5);
  EXPECT_EQ(c.phase_at_cut.rfind("prefill", 0), 0u) << c.phase_at_cut;
  expect_cut_off_node1(c);
}

// Open MPI's keepalive off (as without dayzero-launch's settings): mpirun waits for node1's
// daemon after the ranks' watchdogs gave up, so the supervisor ends it after --abort-grace.
TEST_F(Multinode, SupervisorEndsAnMpirunThatWaitsForALostDaemon) {
  const CutJob c = cut_node1_link("cut-supervised", "tp all_reduce #40", 3, 40, "--abort-grace 5",
                                  "OMPI_MCA_oob_tcp_keepalive_time=0");
  expect_cut_off_node1(c);
  EXPECT_EQ(c.job.outcome.exit_code, 3) << c.job.outcome.output;
  EXPECT_NE(c.job.outcome.output.find("ending its process group"), std::string::npos) << c.job.outcome.output;
  const json sup = json::parse(read_file(c.job.run_dir / "launch" / "supervisor.json"), nullptr, false);
  ASSERT_TRUE(sup.is_object());
  EXPECT_TRUE(sup.value("ended_launcher", false));
  EXPECT_EQ(c.timeline["launcher_ended_by_supervisor"], true);
  EXPECT_NE(c.timeline["verdict"].get<std::string>().find("dayzero-launch ended it"), std::string::npos);
}

// The same launch with nothing cut: exit 0, nothing ended, no supervisor record.
TEST_F(Multinode, CleanLaunchExitsZeroWithNothingKilled) {
  const fs::path dir = scratch_dir("multinode-launch-clean");
  write_file(dir / "run.yaml", config("parallel: {pp: 2, tp: 2}\n"));
  const Outcome o = run_shell(launch_command(dir, ""));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(fs::exists(dir / "run" / "launch" / "supervisor.json"));
  EXPECT_FALSE(fs::exists(dir / "run" / "hang"));
  EXPECT_EQ(read_file(dir / "run" / "launch" / "exit_code"), "0\n");
}

}  // namespace
}  // namespace dayzero::e2e
