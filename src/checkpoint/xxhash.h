// XXH64: a fast non-cryptographic 64-bit checksum (Yann Collet's algorithm), used to
// fingerprint the bytes a rank read from a checkpoint so runs can be compared cheaply.
// Streaming: feed any chunking, the digest equals the one-shot hash of the concatenation.
// Not a cryptographic hash, and not the XXH3/XXH128 variants.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dayzero::checkpoint {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t len);
  // Hash of everything fed so far; the state stays usable for more updates.
  uint64_t digest() const;

 private:
  uint64_t seed_;
  uint64_t acc_[4];
  uint64_t total_len_ = 0;
  uint8_t buf_[32];  // bytes of an incomplete 32-byte stripe
  size_t buf_len_ = 0;
};

uint64_t xxh64(const void* data, size_t len, uint64_t seed = 0);

}  // namespace dayzero::checkpoint
