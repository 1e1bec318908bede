// The CPU backend's own state: the RoPE cos/sin table it keeps between calls must follow the
// positions and inv_freq by value, so a later call at other positions (or the same pointer
// holding new values) is rotated as the kernel alone rotates it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "kernels/ops.h"

namespace dayzero {
namespace {

Tensor host_f32(const std::vector<float>& v, Shape s) {
  Tensor t = Tensor::host(DType::kF32, std::move(s));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

TEST(CpuBackend, RopeTableFollowsPositionsAndFrequencies) {
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  const int64_t n = 5, heads = 2, hd = 8;
  std::vector<float> x(n * heads * hd);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 13) - 0.5f;
  Tensor positions = Tensor::host(DType::kI32, {n});
  Tensor inv_freq = host_f32({1.0f, 0.5f, 0.25f, 0.125f}, {hd / 2});
  auto* pos = static_cast<int32_t*>(positions.data());
  // Same buffers, new values each time: positions 0..4, then 7..11, then new frequencies.
  for (int round = 0; round < 3; ++round) {
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t + (round >= 1 ? 7 : 0));
    if (round == 2) inv_freq.f32()[1] = 0.3f;
    Tensor got = host_f32(x, {n, heads, hd});
    (*be)->rope(got, positions, inv_freq);
    std::vector<float> want = x;
    kernels::cpu::rope_rotate_half(n, heads, hd, pos, inv_freq.f32(), want.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "round " << round;
  }
}

}  // namespace
}  // namespace dayzero
