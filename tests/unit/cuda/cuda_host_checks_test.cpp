// The CUDA kernels' argument checks, which run on the host before any launch, so they are tested
// where no GPU is: the grouped router refuses more groups than its shared memory takes under
// the default 48 KiB limit (a launch past it fails as "invalid argument"); a GEMM of zero rows
// is nothing to do, as on the CPU, and not a shape error that aborts the run.
#include <gtest/gtest.h>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace dayzero::kernels::cuda {
namespace {

TEST(CudaHostChecks, GroupedRouterRefusesGroupsBeyondItsSharedMemory) {
  // 4096 groups of one expert: (2 x 4096 + 4096) x 4 + 4096 + 4096 = 57,344 B of shared memory,
  // past the 49,152 B a launch takes without raising the kernel's limit.
  const Status s = route_sigmoid_group_topk(1, 4096, 1, 4096, 1, true, 1.0f, nullptr, Elem::kF32, nullptr, nullptr,
                                            nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("4096 groups (at most 1024)"), std::string::npos) << s.message();
  // At the limit the arguments pass (no tokens: nothing is launched).
  EXPECT_TRUE(route_sigmoid_group_topk(0, 4096, 1, 1024, 1, true, 1.0f, nullptr, Elem::kF32, nullptr, nullptr,
                                       nullptr, nullptr)
                  .ok());
  // The largest accepted configuration stays under the default dynamic shared memory limit.
  EXPECT_LE((2 * kRouterMaxExperts + kRouterMaxGroups) * 4 + kRouterMaxExperts + kRouterMaxGroups, 48 * 1024);
}

TEST(CudaHostChecks, ZeroRowGemmIsNothingToDo) {
  Gemm g;  // no handle: a zero-row product must not need one
  EXPECT_TRUE(g.matmul_nt(0, 8, 16, Elem::kBF16, nullptr, nullptr, nullptr, false).ok());
  // Negative control: other empty or negative shapes are still refused (here: no handle first).
  EXPECT_FALSE(g.matmul_nt(4, 0, 16, Elem::kBF16, nullptr, nullptr, nullptr, false).ok());
  EXPECT_FALSE(g.matmul_nt(-1, 8, 16, Elem::kBF16, nullptr, nullptr, nullptr, false).ok());
}

}  // namespace
}  // namespace dayzero::kernels::cuda
