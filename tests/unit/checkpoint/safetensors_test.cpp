// SafetensorsFile: writer -> reader round trips for every dtype, and one test per malformed
// header, each checking the status code, exit code 2 and that the file and tensor are named;
// the rules of the safetensors library (unique names, exact coverage, string metadata), deep
// nesting and a FIFO.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::expect_bad;
using test_util::TempDir;
using test_util::write_raw;

constexpr DType kAllDtypes[] = {DType::kF32,     DType::kF16, DType::kBF16, DType::kF8_E4M3,
                                DType::kF8_E5M2, DType::kI8,  DType::kI16,  DType::kI32,
                                DType::kI64,     DType::kU8,  DType::kBool};

std::vector<uint8_t> patterned(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  SafetensorsWriter w;
  std::map<std::string, std::vector<uint8_t>> want;
  for (DType t : kAllDtypes) {
    const std::string name = std::string("w.") + dtype_name(t);
    want[name] = patterned(2 * 3 * dtype_size(t), static_cast<int>(t));
    w.add(name, t, {2, 3}, want[name]);
  }
  w.add("scalar", DType::kF32, {}, test_util::bytes_of(std::vector<float>{1.5f}));
  w.add("empty", DType::kBF16, {0, 4}, {});
  w.set_metadata({{"format", "pt"}});
  ASSERT_TRUE(w.write(path).ok());

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->file_size(), std::filesystem::file_size(path));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), std::size(kAllDtypes) + 2);
  for (size_t i = 1; i < f->tensors().size(); ++i) EXPECT_LT(f->tensors()[i - 1].name, f->tensors()[i].name);

  ByteReader r;
  for (DType t : kAllDtypes) {
    const std::string name = std::string("w.") + dtype_name(t);
    const TensorInfo* info = f->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, t);
    EXPECT_EQ(info->shape, (Shape{2, 3}));
    EXPECT_EQ(info->file, path);
    EXPECT_EQ(info->nbytes, want[name].size());
    std::vector<uint8_t> got(info->nbytes);
    ASSERT_TRUE(r.read(path, info->offset, info->nbytes, got.data()).ok());
    EXPECT_EQ(got, want[name]) << name;
  }
  EXPECT_EQ(f->find("scalar")->shape, Shape{});
  EXPECT_EQ(f->find("scalar")->nbytes, 4u);
  EXPECT_EQ(f->find("empty")->nbytes, 0u);
  EXPECT_EQ(f->find("missing"), nullptr);
  // Header padded to a multiple of 8, so the data section starts 8-byte aligned.
  const uint64_t first = f->find("empty")->offset;
  EXPECT_EQ(first % 8, 0u);
}

// A sparse file has the same header as a written one, its full size, next to nothing on disk,
// and its tensors read as zeros.
TEST(Safetensors, SparseFileMatchesTheWrittenLayout) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("w", DType::kBF16, {4096, 1024}, std::vector<uint8_t>(4096 * 1024 * 2, 7));
  w.add("s", DType::kF32, {32, 8}, std::vector<uint8_t>(32 * 8 * 4, 7));
  w.add("a", DType::kF8_E4M3, {3}, std::vector<uint8_t>(3, 7));
  w.set_metadata({{"format", "pt"}});
  ASSERT_TRUE(w.write(dir.file("dense.safetensors")).ok());
  const Status s = write_sparse_safetensors(dir.file("sparse.safetensors"),
                                            {{"w", DType::kBF16, {4096, 1024}}, {"s", DType::kF32, {32, 8}},
                                             {"a", DType::kF8_E4M3, {3}}},
                                            {{"format", "pt"}});
  ASSERT_TRUE(s.ok()) << s.message();
  auto dense = SafetensorsFile::open(dir.file("dense.safetensors"));
  auto sparse = SafetensorsFile::open(dir.file("sparse.safetensors"));
  ASSERT_TRUE(dense.ok() && sparse.ok()) << sparse.status().message();
  EXPECT_EQ(sparse->file_size(), dense->file_size());
  ASSERT_EQ(sparse->tensors().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sparse->tensors()[i].name, dense->tensors()[i].name);
    EXPECT_EQ(sparse->tensors()[i].offset, dense->tensors()[i].offset);
    EXPECT_EQ(sparse->tensors()[i].nbytes, dense->tensors()[i].nbytes);
  }
  struct stat st;
  ASSERT_EQ(::stat(dir.file("sparse.safetensors").c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 64u << 10) << "8 MiB of data should be a hole";
  ByteReader reader;
  const TensorInfo* t = sparse->find("s");
  std::vector<uint8_t> got(t->nbytes, 1);
  ASSERT_TRUE(reader.read(t->file, t->offset, t->nbytes, got.data()).ok());
  EXPECT_EQ(got, std::vector<uint8_t>(t->nbytes, 0));
}

TEST(Safetensors, FileShorterThanLengthPrefix) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  test_util::write_bytes(path, "abc");
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "too short"});
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
  TempDir dir;
  const std::string path = dir.file("h.safetensors");
  write_raw(path, "{}", 0, 4096);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "header length 4096"});
}

TEST(Safetensors, HeaderLengthOverLimit) {
  TempDir dir;
  const std::string path = dir.file("h.safetensors");
  write_raw(path, "{}", 0, kMaxHeaderBytes + 1);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "exceeds the limit"});
}

TEST(Safetensors, MalformedHeaderJson) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [1], )", 4);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "malformed JSON"});
}

TEST(Safetensors, HeaderNotAnObject) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_raw(path, "[1, 2]", 0);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "not a JSON object"});
}

TEST(Safetensors, UnknownDtype) {
  TempDir dir;
  const std::string path = dir.file("d.safetensors");
  write_raw(path, R"({"w.q": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", 1);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kUnsupported, {path, "w.q", "'F4'"});
}

TEST(Safetensors, NegativeShape) {
  TempDir dir;
  const std::string path = dir.file("s.safetensors");
  write_raw(path, R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", 1);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'w'", "non-negative"});
}

TEST(Safetensors, OffsetsBeginAfterEnd) {
  TempDir dir;
  const std::string path = dir.file("o.safetensors");
  write_raw(path, R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [2, 1]}})", 4);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'w'", "begin > end"});
}

TEST(Safetensors, TruncatedShard) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  SafetensorsWriter w;
  w.add("a", DType::kF32, {4}, std::vector<uint8_t>(16, 1));
  w.add("b", DType::kF32, {4}, std::vector<uint8_t>(16, 2));
  ASSERT_TRUE(w.write(path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'b'", "truncated"});
}

TEST(Safetensors, ByteCountNotNumelTimesSize) {
  TempDir dir;
  const std::string path = dir.file("n.safetensors");
  write_raw(path, R"({"w.bad": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})", 16);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "w.bad", "needs 12"});
}

TEST(Safetensors, OverlappingTensors) {
  TempDir dir;
  const std::string path = dir.file("ov.safetensors");
  write_raw(path,
            R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
            R"( "y": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
            16);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'x'", "'y'", "overlap"});
}

TEST(Safetensors, MetadataNotStringMap) {
  TempDir dir;
  const std::string path = dir.file("md.safetensors");
  write_raw(path, R"({"__metadata__": {"format": 1}})", 0);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "__metadata__", "format"});
}

// The rules of the safetensors library's own validate(): a tensor name once per header, the
// tensors covering the data section exactly, __metadata__ a string-to-string map.
TEST(Safetensors, DuplicateTensorNameIsRefused) {
  TempDir dir;
  const std::string path = dir.file("dup.safetensors");
  write_raw(path,
            R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
            R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
            8);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'w'", "twice"});
}

TEST(Safetensors, GapBetweenTensorsIsRefused) {
  TempDir dir;
  const std::string path = dir.file("gap.safetensors");
  write_raw(path,
            R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
            R"( "y": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
            12);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'y'", "begins at data byte 8", "gaps"});
}

TEST(Safetensors, FirstTensorNotAtZeroIsRefused) {
  TempDir dir;
  const std::string path = dir.file("lead.safetensors");
  write_raw(path, R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'x'", "begins at data byte 4"});
}

TEST(Safetensors, TrailingBytesAreRefused) {
  TempDir dir;
  const std::string path = dir.file("tail.safetensors");
  write_raw(path, R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 9);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "cover 4 bytes of the 9-byte", "trailing"});
}

TEST(Safetensors, ZeroByteTensorsAtTheCursorAreAccepted) {
  TempDir dir;
  const std::string path = dir.file("zero.safetensors");
  write_raw(path,
            R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
            R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
            4);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->tensors().size(), 2u);
}

TEST(Safetensors, DeeplyNestedShapeIsRefusedQuickly) {
  TempDir dir;
  const std::string path = dir.file("deep.safetensors");
  const int depth = 100000;
  write_raw(path, R"({"w": {"dtype": "F32", "data_offsets": [0, 4], "shape": )" + std::string(depth, '[') +
                      std::string(depth, ']') + "}}",
            4);
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = SafetensorsFile::open(path).status();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  expect_bad(s, StatusCode::kCorrupt, {path, "nesting deeper than"});
  EXPECT_LT(s.message().size(), 400u) << "the value must not be printed";
}

TEST(Safetensors, ShapeWithANestedValueIsNotPrinted) {
  TempDir dir;
  const std::string path = dir.file("sh.safetensors");
  write_raw(path, R"({"w": {"dtype": "F32", "data_offsets": [0, 4], "shape": [1, [2, [3, [4]]]]}})", 4);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'w'", "an array of 2"});
}

TEST(Safetensors, MetadataNotAnObject) {
  TempDir dir;
  const std::string path = dir.file("mda.safetensors");
  write_raw(path, R"({"__metadata__": ["format", "pt"]})", 0);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "__metadata__", "an array"});
}

TEST(Safetensors, MetadataNestedValue) {
  TempDir dir;
  const std::string path = dir.file("mdn.safetensors");
  write_raw(path, R"({"__metadata__": {"format": {"nested": "pt"}}})", 0);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kCorrupt, {path, "'format'", "an object, not a string"});
}

TEST(Safetensors, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string path = dir.file("fifo.safetensors");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expect_bad(SafetensorsFile::open(path).status(), StatusCode::kInvalidArgument, {path, "not a regular file"});
}

TEST(Safetensors, MissingFileIsNotFound) {
  TempDir dir;
  expect_bad(SafetensorsFile::open(dir.file("no.safetensors")).status(), StatusCode::kNotFound,
             {"no.safetensors"});
}

// The streaming parser takes every header the writer produces; whatever it gives up on, the
// tree parser decides, so both must give the same verdict, message and tensors on each case.
TEST(Safetensors, WriterOutputTakesTheStreamingPath) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  SafetensorsWriter w;
  w.add("a", DType::kBF16, {2, 3}, std::vector<uint8_t>(12, 1));
  w.add("b", DType::kF32, {}, std::vector<uint8_t>(4, 2));
  w.set_metadata({{"format", "pt"}});
  ASSERT_TRUE(w.write(path).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->parsed_fast());
  auto tree = SafetensorsFile::open(path, HeaderParser::kTree);
  ASSERT_TRUE(tree.ok());
  EXPECT_FALSE(tree->parsed_fast());
}

TEST(Safetensors, StreamingAndTreeParsersAgree) {
  struct Case {
    std::string header;
    size_t data_bytes;
    bool valid, fast;
  };
  const std::vector<Case> cases = {
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4, true, true},
      {R"({"w": {"data_offsets": [0, 4], "shape": [1], "dtype": "F32"}, "__metadata__": {"k": "v"}})", 4, true, true},
      {R"({})", 0, true, true},
      // valid, but not as writers produce it: the tree decides
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": {"x": [1, 2]}}})", 4, true, false},
      {R"({"__metadata__": {}, "w": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]}})", 1, true, true},
      // invalid: each must be refused by both, with the tree's message
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8, false, false},
      {R"({"w": {"dtype": "F32", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4, false, false},
      {R"({"__metadata__": {"k": "v", "k": "w"}})", 0, false, false},
      {R"({"__metadata__": {"k": "v"}, "__metadata__": {"j": "v"}})", 0, false, false},
      {R"({"__metadata__": {"k": 1}})", 0, false, false},
      {R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, false, false},
      {R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 4, false, false},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8, false, false},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, false, false},
      {R"({"w": {"dtype": "F32", "shape": [1]}})", 4, false, false},
      {R"({"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}})", 4, false, false},
      {R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4, false, false},
      {R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8, false, false},
      {R"({"w": [1]})", 0, false, false},
      {R"([])", 0, false, false},
      {R"({"w": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", 4, false, false},
  };
  TempDir dir;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("c" + std::to_string(i) + ".safetensors");
    write_raw(path, cases[i].header, cases[i].data_bytes);
    auto fast = SafetensorsFile::open(path);
    auto tree = SafetensorsFile::open(path, HeaderParser::kTree);
    ASSERT_EQ(fast.ok(), cases[i].valid) << cases[i].header << ": " << fast.status().message();
    ASSERT_EQ(tree.ok(), cases[i].valid) << cases[i].header;
    if (!cases[i].valid) {
      EXPECT_EQ(fast.status().message(), tree.status().message()) << cases[i].header;
      continue;
    }
    EXPECT_EQ(fast->parsed_fast(), cases[i].fast) << cases[i].header;
    ASSERT_EQ(fast->tensors().size(), tree->tensors().size());
    for (size_t t = 0; t < fast->tensors().size(); ++t) {
      EXPECT_EQ(fast->tensors()[t].name, tree->tensors()[t].name);
      EXPECT_EQ(fast->tensors()[t].shape, tree->tensors()[t].shape);
      EXPECT_EQ(fast->tensors()[t].offset, tree->tensors()[t].offset);
    }
    EXPECT_EQ(fast->metadata(), tree->metadata());
  }
}

}  // namespace
}  // namespace dayzero::checkpoint
