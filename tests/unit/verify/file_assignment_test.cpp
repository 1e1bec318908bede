// The files of a verify and their ranks: the shard list from the index (missing shards, files
// the index does not name, entries that leave the folder) and the greedy assignment by bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/writer.h"
#include "verify/file_assignment.h"

namespace dayzero::verify {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dz-verify-files-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(FileAssignment, ShardsOfTheIndexWithSizesMissingAndExtraFiles) {
  TempDir d;
  std::ofstream(d.path / "a.safetensors") << std::string(300, 'x');
  std::ofstream(d.path / "stray.safetensors") << "y";
  ASSERT_TRUE(checkpoint::write_index(d.path.string(), {{"w1", "a.safetensors"}, {"w2", "b.safetensors"}}, 301).ok());
  auto f = list_checkpoint_files(d.path.string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->has_index);
  EXPECT_EQ(f->files, (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
  EXPECT_EQ(f->present, (std::vector<bool>{true, false}));
  EXPECT_EQ(f->sizes, (std::vector<uint64_t>{300, 0}));
  EXPECT_EQ(f->extra_files, std::vector<std::string>{"stray.safetensors"});
  EXPECT_EQ(f->weight_map.at("w2"), "b.safetensors");
}

TEST(FileAssignment, RefusesWhatIsNotACheckpointFolder) {
  TempDir d;
  auto none = list_checkpoint_files(d.path.string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(checkpoint::write_index(d.path.string(), {{"w", "../outside.safetensors"}}, 1).ok());
  auto escaping = list_checkpoint_files(d.path.string());
  ASSERT_FALSE(escaping.ok());
  EXPECT_NE(escaping.status().message().find("leaves the folder"), std::string::npos) << escaping.status().message();
}

TEST(FileAssignment, GreedyByBytesLargestFirst) {
  // 10 to rank 0, 8 to rank 1, 5 to rank 1 (8 < 10), 4 to rank 0 (13 < 14): loads 14 and 13.
  EXPECT_EQ(assign_by_bytes({5, 10, 4, 8}, 2), (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(assign_by_bytes({7, 7, 7}, 1), (std::vector<int>{0, 0, 0}));
  // Ties go to the lower rank, files of equal size in index order.
  EXPECT_EQ(assign_by_bytes({3, 3, 3, 3}, 4), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace dayzero::verify
