// SHA-256 against the FIPS 180-4 / NIST vectors and sha256sum, on both implementations and
// under every chunking of the input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "verify/sha256.h"

namespace dayzero::verify {
namespace {

std::vector<Sha256Impl> impls() {
  std::vector<Sha256Impl> v = {Sha256Impl::kPortable};
  if (cpu_has_sha_ni()) v.push_back(Sha256Impl::kShaNi);
  return v;
}

std::string hex_of(const std::string& s, Sha256Impl impl) { return to_hex(sha256(s.data(), s.size(), impl)); }

TEST(Sha256, KnownVectors) {
  for (Sha256Impl impl : impls()) {
    SCOPED_TRACE(sha256_impl_name(impl));
    EXPECT_EQ(hex_of("", impl), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex_of("abc", impl), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", impl),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                     "mnopqrstnopqrstu",
                     impl),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    EXPECT_EQ(hex_of(std::string(1000000, 'a'), impl),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

TEST(Sha256, ImplementationsAgreeUnderEveryChunking) {
  if (!cpu_has_sha_ni()) GTEST_SKIP() << "this CPU has no SHA extensions: only the portable path runs";
  std::mt19937 gen(7);
  std::vector<uint8_t> data(4099);
  for (auto& b : data) b = static_cast<uint8_t>(gen());
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000, 4099}) {
    const std::string want = to_hex(sha256(data.data(), len, Sha256Impl::kPortable));
    EXPECT_EQ(to_hex(sha256(data.data(), len, Sha256Impl::kShaNi)), want) << "len " << len;
    for (size_t chunk : {1, 3, 63, 64, 100}) {
      Sha256 h(Sha256Impl::kShaNi);
      for (size_t i = 0; i < len; i += chunk) h.update(data.data() + i, std::min(chunk, len - i));
      EXPECT_EQ(to_hex(h.finish()), want) << "len " << len << " chunk " << chunk;
    }
  }
  // A negative control: one flipped bit changes the digest.
  std::vector<uint8_t> flipped = data;
  flipped[2000] ^= 1;
  EXPECT_NE(to_hex(sha256(flipped.data(), flipped.size())), to_hex(sha256(data.data(), data.size())));
}

TEST(Sha256, MatchesSha256sum) {
  const auto path = std::filesystem::temp_directory_path() / "dayzero_sha256_test.bin";
  std::mt19937 gen(11);
  std::vector<uint8_t> data(3 * 1024 * 1024 + 17);
  for (auto& b : data) b = static_cast<uint8_t>(gen());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()),
                                              static_cast<std::streamsize>(data.size()));
  FILE* p = popen(("sha256sum " + path.string()).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::array<char, 65> out{};
  ASSERT_EQ(fread(out.data(), 1, 64, p), 64u);
  pclose(p);
  std::filesystem::remove(path);
  for (Sha256Impl impl : impls())
    EXPECT_EQ(to_hex(sha256(data.data(), data.size(), impl)), std::string(out.data(), 64)) << sha256_impl_name(impl);
}

}  // namespace
}  // namespace dayzero::verify
