// SHA-256 (FIPS 180-4) for whole-file checkpoint hashes, streaming: feed any chunking, the
// digest equals the one-shot hash of the concatenation. The compression runs on the x86 SHA
// extensions (SHA-NI) when the CPU has them, else on a portable loop; the choice is made once
// at run time and both give the same digests. Not HMAC, not SHA-224/384/512.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dayzero::verify {

using Sha256Digest = std::array<uint8_t, 32>;

enum class Sha256Impl { kAuto, kPortable, kShaNi };

// True when this CPU has the SHA extensions (with SSE4.1, which the SHA-NI path also uses).
bool cpu_has_sha_ni();
// "sha-ni" or "portable": the implementation kAuto resolves to on this CPU.
const char* sha256_impl_name(Sha256Impl impl = Sha256Impl::kAuto);

class Sha256 {
 public:
  // REQUIRES: impl is not kShaNi on a CPU without the extensions (cpu_has_sha_ni()).
  explicit Sha256(Sha256Impl impl = Sha256Impl::kAuto);
  void update(const void* data, size_t len);
  // The digest of everything fed so far; the object is spent afterwards (reset() to reuse).
  Sha256Digest finish();
  void reset();

 private:
  void compress(const uint8_t* blocks, size_t n_blocks);

  bool ni_ = false;
  uint32_t state_[8];
  uint64_t total_len_ = 0;
  uint8_t buf_[64];
  size_t buf_len_ = 0;
};

Sha256Digest sha256(const void* data, size_t len, Sha256Impl impl = Sha256Impl::kAuto);
std::string to_hex(const Sha256Digest& d);  // 64 lowercase hex digits

}  // namespace dayzero::verify
