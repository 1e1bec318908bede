// The CUDA build links and runs: library versions are reported everywhere; device checks
// run where a GPU is visible and skip with the runtime's reason elsewhere.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/device.h"

TEST(CudaProbe, ReportsVersionsAndDevices) {
  const auto p = dayzero::kernels::cuda::probe();
  EXPECT_GT(p.runtime_version, 0);
  EXPECT_GT(p.nccl_version, 0);
  if (p.device_count == 0) GTEST_SKIP() << "no GPU visible: " << p.error;
  EXPECT_FALSE(p.first_device_name.empty());
  EXPECT_GT(p.cublas_version, 0);
}

// What the runtime does with a "not ready" event poll (kernels/cuda/device.h): printed for the
// GPU check's log; the poll itself must find the spinning kernel still running.
TEST(CudaProbe, NotReadyStaysAsTheLastError) {
  const auto p = dayzero::kernels::cuda::probe();
  if (p.device_count == 0) GTEST_SKIP() << "no GPU visible: " << p.error;
  const std::string r = dayzero::kernels::cuda::not_ready_probe();
  std::printf("not_ready_probe: %s\n", r.c_str());
  EXPECT_EQ(r.rfind("query=cudaErrorNotReady ", 0), 0u) << r;
}
