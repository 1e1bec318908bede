// Heartbeat: the live file appears at once, is always a whole JSON object, is refreshed at
// the configured interval with the latest phase, and says stopped after stop().
#include "dump/heartbeat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_dir.h"

namespace dayzero::dump {
namespace {

using namespace std::chrono_literals;
using testing::TestDir;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(Heartbeat, FileAppearsAndRefreshes) {
  TestDir dir;
  const std::string path = dir.file("rank-00005.json");
  auto hb = Heartbeat::start(path, 5, 100ms);
  ASSERT_TRUE(hb.ok()) << hb.status().message();
  ASSERT_TRUE(std::filesystem::exists(path));
  const nlohmann::json first = read_json(path);
  EXPECT_EQ(first["rank"], 5);
  EXPECT_EQ(first["pid"], getpid());
  EXPECT_FALSE(first["host"].get<std::string>().empty());
  EXPECT_EQ(first["stopped"], false);

  (*hb)->set_phase("prompt p0 decode");
  (*hb)->set_current("allreduce tp0 #7");
  // Within 1.5 s a later beat carries the new phase; read while the thread rewrites, so a
  // torn file would fail to parse here.
  const auto deadline = std::chrono::steady_clock::now() + 1500ms;
  nlohmann::json j;
  bool seen = false;
  while (std::chrono::steady_clock::now() < deadline) {
    j = read_json(path);
    if (j["phase"] == "prompt p0 decode") {
      seen = true;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(seen) << j.dump();
  EXPECT_EQ(j["current"], "allreduce tp0 #7");
  EXPECT_GT(j["t_ns"].get<int64_t>(), first["t_ns"].get<int64_t>());
  EXPECT_GT(j["beat"].get<int64_t>(), 0);

  (*hb)->stop();
  EXPECT_EQ(read_json(path)["stopped"], true);
  EXPECT_TRUE((*hb)->status().ok());
  (*hb)->stop();  // idempotent
}

// The reader the watchers share gives back what the writer wrote, and refuses what is not a beat.
TEST(Heartbeat, ReadBackMatchesTheWriter) {
  TestDir dir;
  const std::string path = dir.file("rank-00002.json");
  auto hb = Heartbeat::start(path, 2, 100ms);
  ASSERT_TRUE(hb.ok()) << hb.status().message();
  (*hb)->set_phase("load");
  (*hb)->set_current("load model.norm.weight");
  (*hb)->set_progress(3, 7);
  (*hb)->stop();  // the last beat carries everything set so far
  auto r = read_heartbeat(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->pid, getpid());
  EXPECT_EQ(r->phase, "load");
  EXPECT_EQ(r->current, "load model.norm.weight");
  EXPECT_EQ(r->progress_done, 3);
  EXPECT_EQ(r->progress_total, 7);
  EXPECT_TRUE(r->stopped);
  EXPECT_GT(r->t_ns, 0);

  const std::string bad = dir.file("bad.json");
  for (const char* text : {"[1, 2]", "{\"t_ns\": \"soon\"}", "{\"t_ns\": 1", ""}) {
    std::ofstream(bad, std::ios::trunc) << text;
    auto b = read_heartbeat(bad);
    EXPECT_FALSE(b.ok()) << text;
    EXPECT_NE(b.status().message().find(bad), std::string::npos) << b.status().message();
  }
  EXPECT_EQ(read_heartbeat(dir.file("absent.json")).status().code(), StatusCode::kNotFound);
}

TEST(Heartbeat, MissingDirectoryFailsAtStart) {
  auto hb = Heartbeat::start("/nonexistent-dir-dz/live/rank-00000.json", 0, 100ms);
  ASSERT_FALSE(hb.ok());
  EXPECT_EQ(hb.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dayzero::dump
