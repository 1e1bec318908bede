// Run folder names and creation.
#include "dump/run_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_dir.h"

namespace dayzero::dump {
namespace {

TEST(RunFolder, Names) {
  EXPECT_EQ(rank_file_name(3), "rank-00003.h5");
  EXPECT_EQ(rank_file_name(123456), "rank-123456.h5");
  EXPECT_EQ(dump_path("/runs/a", 0), "/runs/a/rank-00000.h5");
  EXPECT_EQ(event_log_path("/runs/a", 3), "/runs/a/events/rank-00003.jsonl");
  EXPECT_EQ(heartbeat_path("/runs/a", 3), "/runs/a/live/rank-00003.json");
}

TEST(RunFolder, MakeCreatesSubfoldersAndIsIdempotent) {
  testing::TestDir dir;
  const std::string run = dir.file("run-20261129-150405/nested");
  ASSERT_TRUE(make_run_folder(run).ok());
  EXPECT_TRUE(std::filesystem::is_directory(run + "/events"));
  EXPECT_TRUE(std::filesystem::is_directory(run + "/live"));
  EXPECT_TRUE(make_run_folder(run).ok());

  const std::string blocked = dir.file("blocked");
  ASSERT_TRUE(make_run_folder(blocked).ok());
  std::filesystem::remove_all(blocked + "/live");
  std::ofstream(blocked + "/live") << "a file in the way";
  Status s = make_run_folder(blocked);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("live"), std::string::npos) << s.message();
  EXPECT_EQ(make_run_folder("").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dayzero::dump
