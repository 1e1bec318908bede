// Catalog: single-file and sharded checkpoints, one test per inconsistent index/shard set, and
// shards that are symlinks (followed and recorded), FIFOs or dangling links (refused).
#include "checkpoint/catalog.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "checkpoint/writer.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::expect_bad;
using test_util::TempDir;

// Writes a shard holding the named F32 tensors of shape [2].
void write_shard(const TempDir& dir, const std::string& file, const std::vector<std::string>& names) {
  SafetensorsWriter w;
  for (const auto& n : names) w.add(n, DType::kF32, {2}, std::vector<uint8_t>(8, 0));
  ASSERT_TRUE(w.write(dir.file(file)).ok());
}

TEST(Catalog, SingleFile) {
  TempDir dir;
  write_shard(dir, "model.safetensors", {"b", "a"});
  auto c = Catalog::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->tensors().size(), 2u);
  EXPECT_EQ(c->tensors()[0].name, "a");
  EXPECT_EQ(c->files(), std::vector<std::string>{dir.file("model.safetensors")});
  EXPECT_EQ(c->total_bytes(), 16u);
  EXPECT_EQ(c->dir(), dir.path());
}

TEST(Catalog, ShardedWithIndex) {
  TempDir dir;
  write_shard(dir, "model-00001-of-00002.safetensors", {"layers.0.w", "embed"});
  write_shard(dir, "model-00002-of-00002.safetensors", {"layers.1.w"});
  ASSERT_TRUE(write_index(dir.path(),
                          {{"embed", "model-00001-of-00002.safetensors"},
                           {"layers.0.w", "model-00001-of-00002.safetensors"},
                           {"layers.1.w", "model-00002-of-00002.safetensors"}},
                          24)
                  .ok());
  auto c = Catalog::open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->tensors().size(), 3u);
  EXPECT_EQ(c->tensors()[0].name, "embed");
  EXPECT_EQ(c->tensors()[2].name, "layers.1.w");
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_EQ(c->total_bytes(), 24u);
  ASSERT_NE(c->find("layers.1.w"), nullptr);
  EXPECT_EQ(c->find("layers.1.w")->file, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(c->find("layers.2.w"), nullptr);
}

TEST(Catalog, NeitherFilePresent) {
  TempDir dir;
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kNotFound, {dir.path(), kSingleFileName});
}

TEST(Catalog, MalformedIndexJson) {
  TempDir dir;
  test_util::write_bytes(dir.file(kIndexFileName), R"({"weight_map": {"a": )");
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt, {kIndexFileName, "malformed JSON"});
}

TEST(Catalog, IndexNamesMissingFile) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 16).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kNotFound,
             {kIndexFileName, "s2.safetensors", "'b'"});
}

TEST(Catalog, IndexPathLeavesFolder) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"evil", "../x.safetensors"}}, 8).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kInvalidArgument,
             {kIndexFileName, "'evil'", "../x.safetensors"});
}

TEST(Catalog, IndexPathAbsolute) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"evil", "/etc/passwd"}}, 8).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kInvalidArgument,
             {kIndexFileName, "'evil'", "/etc/passwd"});
}

TEST(Catalog, TensorInIndexMissingFromShard) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"ghost", "s1.safetensors"}}, 16).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kNotFound, {"'ghost'", "s1.safetensors"});
}

TEST(Catalog, TensorInShardNotInIndex) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a", "stray"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}}, 8).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt,
             {"'stray'", "s1.safetensors", kIndexFileName});
}

TEST(Catalog, DuplicateTensorAcrossShards) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a", "dup"});
  write_shard(dir, "s2.safetensors", {"b", "dup"});
  ASSERT_TRUE(write_index(dir.path(),
                          {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"dup", "s1.safetensors"}}, 24)
                  .ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt,
             {"'dup'", "s1.safetensors", "s2.safetensors"});
}

TEST(Catalog, IndexTotalSizeMustMatchTheTensors) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a", "b"});
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}, 99).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt,
             {kIndexFileName, "metadata.total_size is 99", "hold 16 bytes"});
}

TEST(Catalog, IndexWithoutTotalSizeIsAccepted) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  test_util::write_bytes(dir.file(kIndexFileName), R"({"weight_map": {"a": "s1.safetensors"}})");
  EXPECT_TRUE(Catalog::open(dir.path()).ok());
}

TEST(Catalog, IndexTensorMappedTwiceIsRefused) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  write_shard(dir, "s2.safetensors", {"b"});
  test_util::write_bytes(dir.file(kIndexFileName),
                         R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "a": "s2.safetensors"}})");
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt, {kIndexFileName, "key 'a' appears twice"});
}

TEST(Catalog, DeeplyNestedIndexIsRefused) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  test_util::write_bytes(dir.file(kIndexFileName), R"({"weight_map": {"a": "s1.safetensors"}, "metadata": )" +
                                                       std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt, {kIndexFileName, "nesting deeper than"});
}

// A Hugging Face cache: snapshots/<rev>/ links every file into blobs/.
TEST(Catalog, SymlinkedShardIsReadAndItsTargetRecorded) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("blobs"));
  std::filesystem::create_directories(dir.file("snap"));
  write_shard(dir, "blobs/abc123", {"a"});
  std::filesystem::create_symlink("../blobs/abc123", dir.file("snap/model.safetensors"));
  auto c = Catalog::open(dir.file("snap"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_NE(c->find("a"), nullptr);
  EXPECT_EQ(c->find("a")->file, dir.file("snap/model.safetensors"));
  EXPECT_EQ(c->find("a")->resolved, std::filesystem::canonical(dir.file("blobs/abc123")).string());

  TempDir plain;
  write_shard(plain, "model.safetensors", {"a"});
  auto p = Catalog::open(plain.path());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->find("a")->resolved, "") << "no link, nothing recorded";
}

TEST(Catalog, SymlinkToAFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  std::filesystem::create_symlink("pipe", dir.file("s2.safetensors"));
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 16).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kInvalidArgument,
             {kIndexFileName, "'s2.safetensors'", "'b'", "regular file"});
}

TEST(Catalog, FifoShardIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("model.safetensors").c_str(), 0600), 0);
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kInvalidArgument, {"model.safetensors", "regular file"});
}

TEST(Catalog, DanglingSymlinkIsNotFound) {
  TempDir dir;
  std::filesystem::create_symlink("nowhere", dir.file("model.safetensors"));
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kNotFound, {"model.safetensors", "resolves to nothing"});
  std::filesystem::remove(dir.file("model.safetensors"));
  write_shard(dir, "s1.safetensors", {"a"});
  std::filesystem::create_symlink("gone", dir.file("s2.safetensors"));
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 16).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kNotFound, {"'s2.safetensors'", "resolves to nothing"});
}

TEST(Catalog, CorruptShardGetsShardContext) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  test_util::write_raw(dir.file("s2.safetensors"), "{not json", 0);
  ASSERT_TRUE(write_index(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 16).ok());
  expect_bad(Catalog::open(dir.path()).status(), StatusCode::kCorrupt, {"shard 2 of 2", "s2.safetensors"});
}

// The streaming index parser hands anything unusual to the tree parser: extra metadata keys and
// extra top-level keys are accepted as before, a key given twice anywhere is refused by name.
TEST(Catalog, UnusualIndexesAreDecidedAsByTheTreeParser) {
  TempDir dir;
  write_shard(dir, "s1.safetensors", {"a"});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"metadata": {"total_size": 8, "total_parameters": 2, "format": "pt"}, "weight_map": {"a": "s1.safetensors"}})", ""},
      {R"({"weight_map": {"a": "s1.safetensors"}, "extra": {"nested": [1, 2]}})", ""},
      {R"({"metadata": null, "weight_map": {"a": "s1.safetensors"}})", ""},
      {R"({"metadata": {"total_size": 8, "total_size": 8}, "weight_map": {"a": "s1.safetensors"}})", "appears twice"},
      {R"({"weight_map": {"a": "s1.safetensors"}, "weight_map": {"a": "s1.safetensors"}})", "appears twice"},
      {R"({"metadata": {"total_size": -8}, "weight_map": {"a": "s1.safetensors"}})", "not a non-negative integer"},
      {R"({"weight_map": {"a": 1}})", "not a file name"},
      {R"({"metadata": {}})", "missing object 'weight_map'"},
  };
  for (const auto& [index, error] : cases) {
    test_util::write_bytes(dir.file(kIndexFileName), index);
    auto fast = Catalog::open(dir.path());
    auto tree = Catalog::open(dir.path(), HeaderParser::kTree);
    ASSERT_EQ(fast.ok(), error.empty()) << index << ": " << fast.status().message();
    ASSERT_EQ(tree.ok(), error.empty()) << index;
    if (error.empty()) {
      ASSERT_EQ(fast->tensors().size(), 1u);
      EXPECT_EQ(fast->tensors()[0].name, "a");
    } else {
      EXPECT_NE(fast.status().message().find(error), std::string::npos) << fast.status().message();
      EXPECT_EQ(fast.status().message(), tree.status().message());
    }
  }
}

}  // namespace
}  // namespace dayzero::checkpoint
