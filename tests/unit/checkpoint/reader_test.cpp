// ByteReader: exact ranges, counters, and the status of reads past the end of a file.
#include "checkpoint/reader.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::expect_bad;
using test_util::TempDir;

TEST(ByteReader, ReadsRangesAndCounts) {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  test_util::write_bytes(path, "0123456789");
  ByteReader r;
  char buf[4] = {};
  ASSERT_TRUE(r.read(path, 3, 4, buf).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  ASSERT_TRUE(r.read(path, 0, 0, buf).ok());
  EXPECT_EQ(r.bytes_read(), 4u);
  EXPECT_EQ(r.reads(), 2u);
  auto size = r.file_size(path);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 10u);
}

TEST(ByteReader, EndOfFileBeforeRangeEndIsCorrupt) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  test_util::write_bytes(path, "0123456789");
  ByteReader r;
  char buf[8];
  expect_bad(r.read(path, 6, 8, buf), StatusCode::kCorrupt, {path, "[6, 14)"});
  EXPECT_EQ(r.bytes_read(), 0u);
}

TEST(ByteReader, MissingFileIsNotFound) {
  TempDir dir;
  ByteReader r;
  char buf[1];
  expect_bad(r.read(dir.file("nope.bin"), 0, 1, buf), StatusCode::kNotFound, {"nope.bin"});
}

}  // namespace
}  // namespace dayzero::checkpoint
