// The timeline reader and analysis on hand-written run folders: malformed and unpaired lines
// are skipped and counted (never thrown), clocks are moved by each rank's clock_offset_ns,
// and a two-rank group where one rank never arrived gives that rank as the culprit; a folder
// where every op completed has none.
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

TEST(TimelineAnalysis, NotARunFolderIsNotFound) {
  auto t = load_run_trails((fs::temp_directory_path() / "dz-no-such-run-folder").string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a dayzero run folder"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace dayzero::diag
