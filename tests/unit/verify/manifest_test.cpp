// The verify manifest and the results' JSON form: what one verify writes, the next reads back
// unchanged; a manifest of another format or a truncated one is refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "verify/manifest.h"
#include "verify/results.h"

namespace dayzero::verify {
namespace {

FileResult one_file() {
  FileResult f;
  f.name = "model-00001-of-00002.safetensors";
  f.bytes = 4096;
  f.sha256 = std::string(64, 'a');
  f.rank = 1;
  TensorResult t;
  t.name = "model.layers.0.mlp.up_proj.weight";
  t.dtype = DType::kBF16;
  t.shape = {8, 4};
  t.offset = 128;
  t.nbytes = 64;
  t.xxh64 = 0x0123456789abcdefull;
  t.nan = 2;
  f.tensors.push_back(t);
  return f;
}

TEST(VerifyResults, FileResultsCrossBetweenRanksUnchanged) {
  const FileResult f = one_file();
  const FileResult back = file_from_json(file_to_json(f));
  EXPECT_EQ(back.name, f.name);
  EXPECT_EQ(back.bytes, f.bytes);
  EXPECT_EQ(back.sha256, f.sha256);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].xxh64, f.tensors[0].xxh64);
  EXPECT_EQ(back.tensors[0].shape, f.tensors[0].shape);
  EXPECT_EQ(back.tensors[0].nan, 2);
  EXPECT_EQ(hex64(0xabc), "0000000000000abc");
}

TEST(VerifyManifest, WrittenThenReadBack) {
  Report r;
  r.files.push_back(one_file());
  const std::string path = "/tmp/dz-manifest-" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(write_manifest(path, r).ok());
  auto m = read_manifest(path);
  std::remove(path.c_str());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ManifestFile& f = m->at("model-00001-of-00002.safetensors");
  EXPECT_EQ(f.size, 4096u);
  EXPECT_EQ(f.sha256, std::string(64, 'a'));
  EXPECT_EQ(f.tensor_xxh64.at("model.layers.0.mlp.up_proj.weight"), 0x0123456789abcdefull);
}

TEST(VerifyManifest, AnotherFormatIsRefused) {
  const std::string path = "/tmp/dz-manifest-bad-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"format": "something-else", "files": []})";
  auto m = read_manifest(path);
  std::remove(path.c_str());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
  EXPECT_FALSE(read_manifest("/nonexistent/manifest.json").ok());
}

}  // namespace
}  // namespace dayzero::verify
