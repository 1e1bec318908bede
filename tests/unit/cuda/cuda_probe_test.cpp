// The CUDA build links and runs: library versions are reported everywhere; device checks
// run where a GPU is visible and skip with the runtime's reason elsewhere.
#include <gtest/gtest.h>

#include "kernels/cuda/device.h"

TEST(CudaProbe, ReportsVersionsAndDevices) {
  const auto p = dayzero::kernels::cuda::probe();
  EXPECT_GT(p.runtime_version, 0);
  EXPECT_GT(p.nccl_version, 0);
  if (p.device_count == 0) GTEST_SKIP() << "no GPU visible: " << p.error;
  EXPECT_FALSE(p.first_device_name.empty());
  EXPECT_GT(p.cublas_version, 0);
}
