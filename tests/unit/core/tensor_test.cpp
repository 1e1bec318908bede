// HostArena: tensors placed back to back in one allocation, 64-byte aligned, and allocated on
// their own once it is full.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/tensor.h"

namespace dayzero {
namespace {

uintptr_t addr(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); }

TEST(HostArena, PlacesTensorsBackToBackAligned) {
  HostArena arena(HostArena::padded(3 * 4) + HostArena::padded(100 * 4) + HostArena::padded(16 * 4));
  Tensor a = arena.take(DType::kF32, {3});
  Tensor b = arena.take(DType::kF32, {10, 10});
  Tensor c = arena.take(DType::kF32, {4, 4});
  EXPECT_EQ(b.shape(), (Shape{10, 10}));
  EXPECT_EQ(addr(a) % 64, 0u);
  EXPECT_EQ(addr(b), addr(a) + 64);  // 12 bytes padded to 64
  EXPECT_EQ(addr(c), addr(b) + 448);  // 400 bytes padded to 448
  EXPECT_EQ(arena.used(), arena.capacity());
  // Writes to one stay in its own bytes.
  for (int64_t i = 0; i < 100; ++i) b.f32()[i] = 1.0f;
  for (int64_t i = 0; i < 16; ++i) c.f32()[i] = 2.0f;
  for (int64_t i = 0; i < 3; ++i) a.f32()[i] = 3.0f;
  EXPECT_EQ(b.f32()[99], 1.0f);
  EXPECT_EQ(c.f32()[0], 2.0f);
}

TEST(HostArena, FullArenaAllocatesOnItsOwn) {
  HostArena arena(256);
  Tensor a = arena.take(DType::kF32, {50});  // 200 bytes: fits, padded to 256
  Tensor b = arena.take(DType::kF32, {8});   // nothing left
  EXPECT_EQ(arena.used(), 256u);
  const uintptr_t base = addr(a);
  EXPECT_TRUE(addr(b) < base || addr(b) >= base + 256) << "placed past the arena's end";
  EXPECT_EQ(b.shape(), (Shape{8}));
  b.f32()[7] = 5.0f;  // its own storage, big enough
  EXPECT_EQ(b.f32()[7], 5.0f);
  // The tensors keep the arena's memory alive after the arena itself is gone.
  Tensor kept;
  {
    HostArena scoped(64);
    kept = scoped.take(DType::kF32, {16});
  }
  kept.f32()[15] = 1.0f;
  EXPECT_EQ(kept.f32()[15], 1.0f);
}

}  // namespace
}  // namespace dayzero
