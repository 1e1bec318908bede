// The timeline reader and analysis on hand-written run folders: malformed and unpaired lines
// are skipped and counted (never thrown), clocks are moved by each rank's clock_offset_ns,
// and a two-rank group where one rank never arrived gives that rank as the culprit; a folder
// where every op completed has none. A node whose ranks all left no abort record while the
// other node's were SIGTERMed is named lost with its ranks (control: one SIGTERM record there).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "diag/timeline_analysis.h"
#include "diag/timeline_merge.h"

namespace dayzero::diag {
namespace {
namespace fs = std::filesystem;

fs::path folder(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("dz-timeline-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "events");
  fs::create_directories(d / "live");
  std::ofstream(d / "plan.json") << R"({"world_size": 2})";
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string ev(int64_t t, const char* e, const char* name, int64_t seq) {
  return "{\"t_ns\":" + std::to_string(t) + ",\"ev\":\"" + e + "\",\"kind\":\"collective\",\"name\":\"" + name +
         "\",\"group\":\"tp@pp0.dp0\",\"seq\":" + std::to_string(seq) + ",\"bytes\":64}\n";
}

TEST(TimelineAnalysis, MissingRankIsTheCulpritAndBadLinesAreSkipped) {
  const fs::path d = folder("hang");
  // Rank 1's clock runs 1000 ns ahead of rank 0's.
  write(d / "events" / "rank-00000.jsonl",
        "{\"t_ns\":1,\"ev\":\"meta\",\"rank\":0,\"host\":\"n0\",\"dp\":0,\"pp\":0,\"tp\":0,\"clock_offset_ns\":0}\n" +
            ev(1000000000, "begin", "all_reduce", 0) + ev(1000001000, "end", "all_reduce", 0) +
            ev(2000000000, "begin", "all_reduce", 1) + "not json at all\n" + "{\"t_ns\": \"x\"}\n" +
            ev(2500000000, "end", "all_gather", 7));  // an end without its begin
  write(d / "events" / "rank-00001.jsonl",
        "{\"t_ns\":1,\"ev\":\"meta\",\"rank\":1,\"host\":\"n0\",\"dp\":0,\"pp\":0,\"tp\":1,\"clock_offset_ns\":1000}\n" +
            ev(1000001000, "begin", "all_reduce", 0) + ev(1000002000, "end", "all_reduce", 0) + "{\"t_ns\":5,");
  write(d / "live" / "rank-00000.json", "{\"t_ns\": 5000000000, \"phase\": \"decode a\", \"stopped\": false}");
  write(d / "live" / "rank-00001.json", "{ truncated");

  auto t = load_run_trails(d.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->ranks.size(), 2u);
  EXPECT_EQ(t->ranks[0].skipped_lines, 3);
  EXPECT_EQ(t->ranks[1].skipped_lines, 1);
  EXPECT_FALSE(t->ranks[1].has_heartbeat);
  ASSERT_EQ(t->ranks[1].slices.size(), 1u);
  EXPECT_EQ(t->ranks[1].slices[0].t_begin_ns, 1000000000) << "rank 1's clock offset is applied";

  const Analysis a = analyse(*t);
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].ops, 1);
  EXPECT_DOUBLE_EQ(a.groups[0].max_spread_s, 0.0) << "arrivals are compared on one clock";
  ASSERT_EQ(a.stuck.size(), 1u);
  EXPECT_EQ(a.stuck[0].seq, 1);
  EXPECT_EQ(a.stuck[0].entered, std::vector<int>{0});
  EXPECT_EQ(a.stuck[0].never, std::vector<int>{1});
  EXPECT_EQ(a.culprits, std::vector<int>{1});
  EXPECT_EQ(a.ranks[0].waiting_in, "all_reduce #1 of tp@pp0.dp0");
  EXPECT_EQ(a.ranks[1].heartbeat, "none");
  EXPECT_EQ(a.verdict.rfind("rank 1 (node n0, pp 0, tp 1) never entered all_reduce #1 of tp@pp0.dp0", 0), 0u)
      << a.verdict;
  fs::remove_all(d);
}

std::string phase(int64_t t, const char* e, const char* name) {
  return "{\"t_ns\":" + std::to_string(t) + ",\"ev\":\"" + e + "\",\"kind\":\"phase\",\"name\":\"" + name +
         "\",\"group\":\"\",\"seq\":-1,\"bytes\":0}\n";
}

TEST(TimelineAnalysis, CommunicationShareCountsOnlyOpsInsidePhasePrompts) {
  const fs::path d = folder("share");
  // Rank 0: phase prompts 1.0 s long; inside it 0.25 s of tp all-reduce; an op before it (the
  // load's) is not counted.
  write(d / "events" / "rank-00000.jsonl",
        ev(100000000, "begin", "all_reduce", 0) + ev(200000000, "end", "all_reduce", 0) +
            phase(1000000000, "begin", "prompts") + ev(1100000000, "begin", "all_reduce", 1) +
            ev(1350000000, "end", "all_reduce", 1) + phase(2000000000, "end", "prompts"));
  // Rank 1 never completed its phase prompts: no share.
  write(d / "events" / "rank-00001.jsonl", phase(1000000000, "begin", "prompts"));
  auto t = load_run_trails(d.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Analysis a = analyse(*t);
  ASSERT_EQ(a.comm.size(), 1u);
  EXPECT_EQ(a.comm[0].rank, 0);
  EXPECT_NEAR(a.comm[0].prompts_s, 1.0, 1e-12);
  EXPECT_NEAR(a.comm[0].comm_s, 0.25, 1e-12);
  ASSERT_EQ(a.comm[0].by_kind.size(), 1u);
  EXPECT_EQ(a.comm[0].by_kind[0].first, "tp");
  EXPECT_NE(to_text(a).find("rank 0 (node ?): 0.250 / 1.000 s (25.0%): tp 0.250"), std::string::npos) << to_text(a);
  EXPECT_NEAR(to_json(a)["comm_share"][0]["share"].get<double>(), 0.25, 1e-12);
  fs::remove_all(d);
}

TEST(TimelineAnalysis, CompletedOpsGiveNoHang) {
  const fs::path d = folder("ok");
  write(d / "events" / "rank-00000.jsonl", ev(10, "begin", "all_reduce", 0) + ev(20, "end", "all_reduce", 0));
  write(d / "events" / "rank-00001.jsonl", ev(12, "begin", "all_reduce", 0) + ev(20, "end", "all_reduce", 0));
  auto t = load_run_trails(d.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Analysis a = analyse(*t);
  EXPECT_TRUE(a.stuck.empty());
  EXPECT_TRUE(a.culprits.empty());
  EXPECT_EQ(a.verdict.rfind("no hang", 0), 0u) << a.verdict;
  fs::remove_all(d);
}

TEST(TimelineAnalysis, LinesOutsideTheFastFormatReadAlikeAndSlicesAreOptional) {
  // The same two-rank hang written twice: once in EventLog's exact layout (the dedicated
  // parser), once with spaces, other key orders and an escape in the group name (the JSON
  // reader).
  // Both folders, loaded with and without their slices, give the same analysis.
  const auto exact = [](int64_t t, const char* e, int64_t seq) {
    return "{\"t_ns\":" + std::to_string(t) + ",\"ev\":\"" + e +
           "\",\"kind\":\"collective\",\"name\":\"all_reduce\",\"group\":\"tp0\",\"seq\":" + std::to_string(seq) +
           ",\"bytes\":64}\n";
  };
  const auto loose = [](int64_t t, const char* e, int64_t seq) {
    return "{ \"ev\": \"" + std::string(e) + "\", \"seq\": " + std::to_string(seq) +
           ", \"group\": \"tp\\u0030\", \"kind\": \"collective\", \"name\": \"all_reduce\", \"bytes\": 64, \"t_ns\": " +
           std::to_string(t) + " }\n";
  };
  std::vector<nlohmann::ordered_json> results;
  for (const auto& line : {std::function<std::string(int64_t, const char*, int64_t)>(exact),
                           std::function<std::string(int64_t, const char*, int64_t)>(loose)}) {
    const fs::path d = folder("fmt");
    write(d / "events" / "rank-00000.jsonl", line(1764547200000000000, "begin", 0) +
                                                 line(1764547200000001000, "end", 0) +
                                                 line(1764547200000002000, "begin", 1));
    write(d / "events" / "rank-00001.jsonl", line(1764547200000000500, "begin", 0) +
                                                 line(1764547200000001000, "end", 0));
    for (bool keep : {true, false}) {
      auto t = load_run_trails(d.string(), {.keep_slices = keep});
      ASSERT_TRUE(t.ok()) << t.status().message();
      EXPECT_EQ(t->ranks[0].skipped_lines, 0);
      EXPECT_EQ(t->ranks[0].slices.size(), keep ? 2u : 0u);
      EXPECT_EQ(t->ranks[0].n_slices, 2);
      results.push_back(to_json(analyse(*t)));
    }
    fs::remove_all(d);
  }
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0]["culprits"], nlohmann::ordered_json::array({1})) << results[0].dump();
  EXPECT_EQ(results[0]["stuck"][0]["label"], "tp0");
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << i;
}

// Two nodes of two ranks: n1's ranks (2 stalled outside the op, 3 blocked inside it) were
// killed together; the launcher then SIGTERMed n0's ranks, which wrote their abort records.
TEST(TimelineAnalysis, NodeWhoseRanksAllVanishedIsNamedLost) {
  for (bool rank3_sigtermed : {false, true}) {
    const fs::path d = folder(rank3_sigtermed ? "node-control" : "node-lost");
    write(d / "plan.json", R"({"world_size": 4})");
    const auto meta = [](int rank, const char* host, int pp, int tp) {
      return "{\"t_ns\":1,\"ev\":\"meta\",\"rank\":" + std::to_string(rank) + ",\"host\":\"" + host +
             "\",\"dp\":0,\"pp\":" + std::to_string(pp) + ",\"tp\":" + std::to_string(tp) + ",\"clock_offset_ns\":0}\n";
    };
    const auto abort = [](int64_t t, int rank) {
      return "{\"t_ns\":" + std::to_string(t) + ",\"ev\":\"begin\",\"kind\":\"abort\",\"name\":\"rank " +
             std::to_string(rank) + ": terminated by SIGTERM during all_reduce\",\"group\":\"\",\"seq\":-1,\"bytes\":0}\n";
    };
    const auto beat = [](int64_t t) {
      return "{\"t_ns\": " + std::to_string(t) + ", \"phase\": \"decode a\", \"stopped\": false}";
    };
    constexpr int64_t kS = 1000000000;
    // n0's ranks wait in an op of their own group and are SIGTERMed at 10 s.
    for (int r : {0, 1}) {
      std::string g = ev(1 * kS, "begin", "all_reduce", 0) + ev(1 * kS + 10, "end", "all_reduce", 0) +
                      ev(2 * kS, "begin", "all_reduce", 1) + abort(10 * kS, r);
      write(d / "events" / ("rank-0000" + std::to_string(r) + ".jsonl"), meta(r, "n0", 0, r) + g);
      write(d / "live" / ("rank-0000" + std::to_string(r) + ".json"), beat(10 * kS));
    }
    // n1: both completed seq 0 of tp@pp1.dp0; rank 3 entered seq 1, rank 2 never did.
    const auto ev1 = [&](int64_t t, const char* e, int64_t seq) {
      std::string line = ev(t, e, "all_reduce", seq);
      return line.replace(line.find("tp@pp0.dp0"), 10, "tp@pp1.dp0");
    };
    write(d / "events" / "rank-00002.jsonl",
          meta(2, "n1", 1, 0) + ev1(1 * kS, "begin", 0) + ev1(1 * kS + 10, "end", 0));
    write(d / "events" / "rank-00003.jsonl", meta(3, "n1", 1, 1) + ev1(1 * kS, "begin", 0) +
                                                  ev1(1 * kS + 10, "end", 0) + ev1(3 * kS, "begin", 1) +
                                                  (rank3_sigtermed ? abort(10 * kS, 3) : ""));
    write(d / "live" / "rank-00002.json", beat(9 * kS));
    write(d / "live" / "rank-00003.json", beat(9 * kS));

    auto t = load_run_trails(d.string());
    ASSERT_TRUE(t.ok()) << t.status().message();
    const Analysis a = analyse(*t);
    EXPECT_EQ(a.nodes, 2);
    EXPECT_EQ(a.culprits, std::vector<int>{2}) << a.verdict;
    if (rank3_sigtermed) {
      EXPECT_TRUE(a.lost_nodes.empty()) << a.verdict;
      EXPECT_EQ(a.ranks[3].heartbeat, "alive");
      EXPECT_EQ(a.verdict.rfind("rank 2 (node n1, pp 1, tp 0) never entered", 0), 0u) << a.verdict;
    } else {
      ASSERT_EQ(a.lost_nodes.size(), 1u) << a.verdict;
      EXPECT_EQ(a.lost_nodes[0].host, "n1");
      EXPECT_EQ(a.lost_nodes[0].ranks, (std::vector<int>{2, 3}));
      for (int r : {2, 3}) EXPECT_EQ(a.ranks[r].heartbeat, "dead") << r;
      for (int r : {0, 1}) EXPECT_EQ(a.ranks[r].heartbeat, "alive") << r;
      EXPECT_EQ(a.verdict.rfind("node n1 was lost with all its ranks (2, 3)", 0), 0u) << a.verdict;
      EXPECT_NE(a.verdict.find("rank 2 (node n1, pp 1, tp 0) never entered all_reduce #1 of tp@pp1.dp0"),
                std::string::npos)
          << a.verdict;
      const auto j = to_json(a);
      EXPECT_EQ(j["lost_nodes"][0]["host"], "n1") << j.dump();
      EXPECT_NE(to_text(a).find("node lost: n1, ranks 2, 3"), std::string::npos) << to_text(a);
    }
    fs::remove_all(d);
  }
}

TEST(TimelineAnalysis, NotARunFolderIsNotFound) {
  auto t = load_run_trails((fs::temp_directory_path() / "dz-no-such-run-folder").string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a dayzero run folder"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace dayzero::diag
