// XXH64 against published vectors (and libxxhash 0.8.1 for the longer inputs), and
// streaming in arbitrary pieces against the one-shot hash.
#include "checkpoint/xxhash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace dayzero::checkpoint {
namespace {

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

TEST(Xxh64, KnownVectors) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(xxh64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ULL);
  const char* s = "Nobody inspects the spammish repetition";  // 39 bytes: one full stripe
  EXPECT_EQ(xxh64(s, std::strlen(s)), 0xFBCEA83C8A378BF1ULL);
  EXPECT_EQ(xxh64("xxhash", 6, 20141025), 0xB559B98D844E0635ULL);
  const auto p = pattern(1000);
  EXPECT_EQ(xxh64(p.data(), p.size()), 0x5F235FA033F1A3FBULL);
  EXPECT_EQ(xxh64(p.data(), p.size(), 0x9E3779B97F4A7C15ULL), 0x442ACD0A822E86F6ULL);
}

TEST(Xxh64, StreamingMatchesOneShot) {
  const auto p = pattern(300);
  for (size_t n : {0, 1, 31, 32, 33, 64, 100, 300}) {
    const uint64_t want = xxh64(p.data(), n, 5);
    for (size_t split = 0; split <= n; ++split) {
      Xxh64 h(5);
      h.update(p.data(), split);
      h.update(p.data() + split, n - split);
      ASSERT_EQ(h.digest(), want) << "n=" << n << " split=" << split;
    }
    Xxh64 bytewise(5);
    for (size_t i = 0; i < n; ++i) bytewise.update(p.data() + i, 1);
    EXPECT_EQ(bytewise.digest(), want) << "n=" << n;
  }
}

}  // namespace
}  // namespace dayzero::checkpoint
