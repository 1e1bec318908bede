// EventLog and Timeline: every line is one JSON object with the schema's keys, a begin
// without its end stays visible, concurrent writers never interleave lines, and the
// timeline's in-memory events match what it logged.
#include "dump/event_log.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "dump/timeline.h"
#include "test_dir.h"

namespace dayzero::dump {
namespace {

using testing::TestDir;

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty());
    out.push_back(nlohmann::json::parse(line));  // throws (fails the test) on a bad line
  }
  return out;
}

TEST(EventLog, LinesAreJsonWithSchemaKeys) {
  TestDir dir;
  const std::string path = dir.file("rank-00000.jsonl");
  auto log = EventLog::open(path);
  ASSERT_TRUE(log.ok()) << log.status().message();
  ASSERT_TRUE(
      (*log)->append(11, "begin", "allreduce", "layers.3.attn_out \"q\"\n", "tp0", 4, 4096).ok());
  ASSERT_TRUE(
      (*log)->append(12, "end", "allreduce", "layers.3.attn_out \"q\"\n", "tp0", 4, 4096).ok());
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["t_ns"], 11);
  EXPECT_EQ(lines[0]["ev"], "begin");
  EXPECT_EQ(lines[0]["kind"], "allreduce");
  EXPECT_EQ(lines[0]["name"], "layers.3.attn_out \"q\"\n");
  EXPECT_EQ(lines[0]["group"], "tp0");
  EXPECT_EQ(lines[0]["seq"], 4);
  EXPECT_EQ(lines[0]["bytes"], 4096);
  EXPECT_EQ(lines[1]["ev"], "end");

  // Reopening appends rather than truncating.
  log->reset();
  auto again = EventLog::open(path);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->append(13, "begin", "load", "x", "", -1, 0).ok());
  EXPECT_EQ(read_lines(path).size(), 3u);
}

TEST(EventLog, MissingDirectoryIsNotFound) {
  auto log = EventLog::open("/nonexistent-dir-dz/events/rank-00000.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kNotFound);
  EXPECT_NE(log.status().message().find("rank-00000.jsonl"), std::string::npos);
}

TEST(EventLog, ConcurrentWritersKeepWholeLines) {
  TestDir dir;
  const std::string path = dir.file("rank-00001.jsonl");
  auto log = EventLog::open(path);
  ASSERT_TRUE(log.ok());
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string name(200, char('a' + t));  // long enough to expose interleaving
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_TRUE((*log)->append(i, "begin", "send", name, "pp", i, t).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), size_t(kThreads * kPerThread));
  for (const auto& j : lines) {
    const int t = j["bytes"];
    EXPECT_EQ(j["name"], std::string(200, char('a' + t)));
  }
}

TEST(Timeline, BeginWithoutEndStaysVisible) {
  TestDir dir;
  const std::string path = dir.file("rank-00002.jsonl");
  auto log = EventLog::open(path);
  ASSERT_TRUE(log.ok());
  Timeline tl(log->get());
  { ScopedEvent load(tl, "load", "shard 1 of 2", "", -1, 1 << 20); }
  const Timeline::Handle h = tl.begin("allreduce", "layers.0.ffn_out", "tp0", 3, 256);
  // The rank "dies" here: the file already holds the open begin.
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["ev"], "begin");
  EXPECT_EQ(lines[1]["ev"], "end");
  EXPECT_EQ(lines[1]["name"], "shard 1 of 2");
  EXPECT_EQ(lines[2]["ev"], "begin");
  EXPECT_EQ(lines[2]["kind"], "allreduce");
  EXPECT_EQ(lines[2]["group"], "tp0");
  EXPECT_EQ(lines[2]["seq"], 3);
  EXPECT_GE(lines[1]["t_ns"].get<int64_t>(), lines[0]["t_ns"].get<int64_t>());

  ASSERT_EQ(tl.snapshot().size(), 2u);
  EXPECT_GE(tl.snapshot()[0].t_end_ns, tl.snapshot()[0].t_begin_ns);
  EXPECT_EQ(tl.snapshot()[1].t_end_ns, -1);
  EXPECT_EQ(tl.snapshot()[0].bytes, 1 << 20);
  tl.end(h);
  EXPECT_GE(tl.snapshot()[1].t_end_ns, tl.snapshot()[1].t_begin_ns);
  EXPECT_EQ(read_lines(path).size(), 4u);
  EXPECT_TRUE(tl.log_status().ok());
}

TEST(Timeline, WorksWithoutALog) {
  Timeline tl;
  ScopedEvent e(tl, "forward", "prompt p0 prefill");
  e.end();
  e.end();  // a second end is a no-op
  ASSERT_EQ(tl.snapshot().size(), 1u);
  EXPECT_EQ(tl.snapshot()[0].kind, "forward");
  EXPECT_EQ(tl.snapshot()[0].seq, -1);
  EXPECT_GE(tl.snapshot()[0].t_end_ns, tl.snapshot()[0].t_begin_ns);
}

}  // namespace
}  // namespace dayzero::dump
