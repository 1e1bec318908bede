// The device memory a CUDA rank holds beyond the plan (backend/device_memory.h) and the plan
// check that counts it: a plan that fits the free memory on its own but not with the staging,
// cuBLAS, NCCL and GEMM workspaces is refused, naming each part; the same plan without the
// overhead passes (the check as it was, which let it through to an out-of-memory at reserve).
#include <gtest/gtest.h>

#include "backend/device_memory.h"

namespace dayzero::backend {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;

TEST(DeviceMemory, OverheadParts) {
  const DeviceOverhead o = cuda_device_overhead(2, 40 * kMiB, 1152 * kMiB);
  EXPECT_EQ(o.staging, 64 * kMiB);
  EXPECT_EQ(o.cublas, 32 * kMiB);
  EXPECT_EQ(o.nccl, 1024 * kMiB);
  EXPECT_EQ(o.total(), (64 + 32 + 1024 + 40 + 1152) * kMiB);
  EXPECT_EQ(o.describe(), "staging 64 MiB, cuBLAS 32 MiB, NCCL 1024 MiB (2 communicators), GEMM workspaces 1192 MiB");
  EXPECT_EQ(cuda_device_overhead(0, 0, 0).describe(),
            "staging 64 MiB, cuBLAS 32 MiB, NCCL 0 MiB (0 communicators), GEMM workspaces 0 MiB");
}

// DeepSeek-V3's dense layers at tp1 with 32k tokens: x [32768, 18432] rounded to bf16 for the
// down projection is 1.125 GiB of activation workspace, more than the plan's 1 GiB headroom.
TEST(DeviceMemory, AWorkspaceBeyondTheHeadroomIsRefused) {
  const int64_t activation_ws = int64_t{32768} * 18432 * 2;
  EXPECT_EQ(activation_ws, 1152 * kMiB);
  const DeviceOverhead o = cuda_device_overhead(0, 0, activation_ws);
  const int64_t plan = 78 * kGiB, free_b = 79 * kGiB, total = 80 * kGiB;
  const Status s = check_device_fit(plan, o, 3, free_b, total);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "backend cuda: the plan needs 79872 MiB on device 3 and the backend 1248 MiB more (staging 64 MiB, "
            "cuBLAS 32 MiB, NCCL 0 MiB (0 communicators), GEMM workspaces 1152 MiB), 81120 MiB in all, but the "
            "device has 80896 MiB free of 81920 MiB; use more ranks (tp/pp) or a smaller topology.memory_fraction");
  // Negative control: the plan's bytes alone fit, so a check without the overhead passes.
  EXPECT_TRUE(check_device_fit(plan, DeviceOverhead{}, 3, free_b, total).ok());
}

TEST(DeviceMemory, FitsWithTheOverheadAndNoEstimateIsNoCheck) {
  const DeviceOverhead o = cuda_device_overhead(3, 100 * kMiB, 200 * kMiB);
  const int64_t free_b = 70 * kGiB;
  EXPECT_TRUE(check_device_fit(free_b - o.total(), o, 0, free_b, 80 * kGiB).ok());
  EXPECT_FALSE(check_device_fit(free_b - o.total() + 1, o, 0, free_b, 80 * kGiB).ok());
  EXPECT_TRUE(check_device_fit(0, o, 0, 0, 80 * kGiB).ok());
}

}  // namespace
}  // namespace dayzero::backend
