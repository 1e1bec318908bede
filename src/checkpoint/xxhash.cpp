// XXH64 reference algorithm (little-endian loads), streaming form.
#include "checkpoint/xxhash.h"

#include <bit>
#include <cstring>

namespace dayzero::checkpoint {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

static_assert(std::endian::native == std::endian::little, "xxh64 loads assume little-endian");

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}
uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * kP1 + kP4;
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed), acc_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1} {}

void Xxh64::update(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_len_ += len;
  if (buf_len_ + len < 32) {
    if (len) std::memcpy(buf_ + buf_len_, p, len);
    buf_len_ += len;
    return;
  }
  if (buf_len_) {
    const size_t fill = 32 - buf_len_;
    std::memcpy(buf_ + buf_len_, p, fill);
    for (int i = 0; i < 4; ++i) acc_[i] = round(acc_[i], load64(buf_ + 8 * i));
    p += fill;
    len -= fill;
    buf_len_ = 0;
  }
  for (; len >= 32; p += 32, len -= 32) {
    for (int i = 0; i < 4; ++i) acc_[i] = round(acc_[i], load64(p + 8 * i));
  }
  if (len) std::memcpy(buf_, p, len);
  buf_len_ = len;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_len_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) + std::rotl(acc_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge_round(h, acc_[i]);
  } else {
    h = seed_ + kP5;
  }
  h += total_len_;
  const uint8_t* p = buf_;
  size_t len = buf_len_;
  for (; len >= 8; p += 8, len -= 8) h = std::rotl(h ^ round(0, load64(p)), 27) * kP1 + kP4;
  if (len >= 4) {
    h = std::rotl(h ^ (load32(p) * kP1), 23) * kP2 + kP3;
    p += 4;
    len -= 4;
  }
  for (; len > 0; ++p, --len) h = std::rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t len, uint64_t seed) {
  Xxh64 s(seed);
  s.update(data, len);
  return s.digest();
}

}  // namespace dayzero::checkpoint
