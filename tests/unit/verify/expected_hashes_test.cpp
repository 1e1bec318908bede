// The expected-hash parsers: Git-LFS pointers (single, concatenated with `==` lines, a folder
// of them), sha256sum lists, malformed input, and the WizardLM-2-8x22B pointers against its index.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/json.h"
#include "verify/expected_hashes.h"

namespace dayzero::verify {
namespace {

const std::string kA = "9e5cc2f91f7830364eff657b53df4f855091996cb2db7de2b69b8f11fa06be0a";
const std::string kB = "24dbc249686530b5bcf630c6edae25fff212900d340946fb868ebd3dd8c62851";

TEST(ExpectedHashes, LfsPointerAlone) {
  auto r = parse_expected_hashes("version https://git-lfs.github.com/spec/v1\noid sha256:" + kA + "\nsize 42\n", "p",
                                 "model.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "model.safetensors");
  EXPECT_EQ((*r)[0].sha256, kA);
  EXPECT_EQ((*r)[0].size, 42u);
  // Without a name to give it, a lone pointer is refused.
  EXPECT_FALSE(parse_expected_hashes("version https://git-lfs.github.com/spec/v1\noid sha256:" + kA + "\n", "p").ok());
}

TEST(ExpectedHashes, LfsConcatenated) {
  const std::string text = "== a.safetensors\nversion https://git-lfs.github.com/spec/v1\noid sha256:" + kA +
                           "\nsize 10\n== b.safetensors\r\nversion https://git-lfs.github.com/spec/v1\r\noid sha256:" +
                           kB + "\r\nsize 20\r\n";
  auto r = parse_expected_hashes(text, "p");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].name, "b.safetensors");
  EXPECT_EQ((*r)[1].sha256, kB);
  EXPECT_EQ((*r)[1].size, 20u);
}

TEST(ExpectedHashes, Sha256sumList) {
  std::string upper = kB;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  auto r = parse_expected_hashes(kA + "  ./a.safetensors\n" + upper + " *b.safetensors\n\n", "sums");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "a.safetensors");
  EXPECT_FALSE((*r)[0].size.has_value());
  EXPECT_EQ((*r)[1].name, "b.safetensors");
  EXPECT_EQ((*r)[1].sha256, kB);
}

TEST(ExpectedHashes, MalformedIsRefusedWithTheLine) {
  const std::string v = "version https://git-lfs.github.com/spec/v1\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {kA.substr(1) + "  a\n", "line 1"},                                        // 63 digits
      {kA + "  a\n" + "zz\n", "line 2"},                                         // junk line
      {"== a\n" + v + "size 3\n", "oid"},                                        // no oid
      {"== a\n" + v + "oid sha256:" + kA + "\nsize 12x\n", "line 4"},            // bad size
      {"== a\n" + v + "oid sha256:" + kA + "\nsize 99999999999999999999\n", "line 4"},  // overflow
      {"== a\n" + v + "oid sha256:" + kA + "\n== a\n" + v + "oid sha256:" + kB + "\n", "twice"},
      {"== a\n" + v + "oid sha256:" + kA + "\nfoo bar\n", "unexpected"},
      {"== a\n", "no LFS pointer"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = parse_expected_hashes(text, "hashes.txt");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(r.status().message().find("hashes.txt"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }
}

TEST(ExpectedHashes, FolderOfPointerFiles) {
  const auto d = std::filesystem::temp_directory_path() / "dayzero_expected_hashes_folder";
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  std::ofstream(d / "m-1.safetensors") << "version https://git-lfs.github.com/spec/v1\noid sha256:" << kA << "\nsize 5\n";
  std::ofstream(d / "m-2.safetensors") << "version https://git-lfs.github.com/spec/v1\noid sha256:" << kB << "\nsize 6\n";
  std::ofstream(d / "README.md") << "not a pointer";
  auto r = read_expected_hashes(d.string());
  std::filesystem::remove_all(d);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "m-1.safetensors");
  EXPECT_EQ((*r)[1].size, 6u);
}

// The real record of a 59-shard checkpoint: one entry per shard of the index, and the sizes
// add up to the index's tensor bytes plus one header per shard.
TEST(ExpectedHashes, WizardLmPointersMatchTheIndex) {
  const std::string dir = std::string(DAYZERO_FIXTURES_DIR) + "/configs/WizardLM-2-8x22B";
  auto r = read_expected_hashes(dir + "/lfs_pointers_concatenated.txt");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 59u);
  auto index = read_json_file(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(index.ok());
  std::set<std::string> shards;
  for (const auto& [t, f] : (*index)["weight_map"].items()) shards.insert(f.get<std::string>());
  ASSERT_EQ(shards.size(), 59u);
  uint64_t total = 0;
  for (const auto& e : *r) {
    EXPECT_TRUE(shards.count(e.name)) << e.name;
    ASSERT_TRUE(e.size.has_value()) << e.name;
    total += *e.size;
  }
  const uint64_t tensor_bytes = (*index)["metadata"]["total_size"].get<uint64_t>();
  EXPECT_EQ((*r)[0].name, "model-00001-of-00059.safetensors");
  EXPECT_EQ((*r)[0].size, 4998663696u);
  EXPECT_EQ((*r)[0].sha256, kA);
  // Headers: 8 bytes of length plus a JSON header of at most a few hundred KiB per shard.
  EXPECT_GT(total, tensor_bytes);
  EXPECT_LT(total - tensor_bytes, 59u * (1u << 20));
}

}  // namespace
}  // namespace dayzero::verify
