// A 1-rank NCCL communicator (label gpu; skips where no device is visible): bootstrap over the
// world's MpiComm, all_reduce / all_gather / broadcast of device tensors on the CUDA backend's
// stream (a group of one returns its own values), host tensors handed to MPI, argument errors
// before any NCCL call, and the timeline's separate enqueue and completion events; and a kernel
// launched right after a collective that had to wait (its completion event polled "not ready"
// while long GEMMs ran ahead of it), whose launch check must not read that poll's code.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "comm/groups.h"
#include "comm/mpi_env.h"
#include "comm/nccl_comm.h"
#include "dump/timeline.h"

namespace dayzero::comm {
namespace {

plan::Plan one_rank_plan() {
  plan::Plan p;
  p.world_size = 1;
  p.ranks.push_back(plan::RankCoord{});
  return p;
}

TEST(NcclSmoke, OneRankCollectives) {
  if (!backend::cuda_built()) GTEST_SKIP() << "this dayzero was built without CUDA";
  auto n = backend::cuda_device_count();
  if (!n.ok() || *n == 0) GTEST_SKIP() << "no CUDA device is visible";
  backend::BackendOptions o;
  o.kind = "cuda";
  o.compute_dtype = DType::kF32;
  auto be = backend::make_backend(o);
  ASSERT_TRUE(be.ok()) << be.status().message();
  dump::Timeline timeline;
  auto groups = ProcessGroups::create(one_rank_plan(), 0, nullptr);
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  auto nccl = NcclComm::create(groups->mpi_world(), 0, (*be)->device_stream(), &timeline, 5.0);
  ASSERT_TRUE(nccl.ok()) << nccl.status().message();
  NcclComm& c = **nccl;
  EXPECT_EQ(c.size(), 1);

  Tensor h = Tensor::host(DType::kF32, {2, 3});
  for (int i = 0; i < 6; ++i) h.f32()[i] = static_cast<float>(i + 1);
  Tensor d = (*be)->to_device(h);
  ASSERT_TRUE(c.all_reduce_sum(d).ok());
  Tensor back = Tensor::host(DType::kF32, {2, 3});
  (*be)->to_host(d, back);
  EXPECT_EQ(std::memcmp(back.data(), h.data(), h.bytes()), 0);

  Tensor g = (*be)->empty(DType::kF32, {2, 3});
  ASSERT_TRUE(c.all_gather(d, g).ok());
  (*be)->to_host(g, back);
  EXPECT_EQ(std::memcmp(back.data(), h.data(), h.bytes()), 0);
  ASSERT_TRUE(c.broadcast(d, 0).ok());

  // Argument errors come back before NCCL is called.
  Tensor wrong = (*be)->empty(DType::kF32, {3, 3});
  EXPECT_EQ(c.all_gather(d, wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.broadcast(d, 1).code(), StatusCode::kInvalidArgument);
  Tensor bf = (*be)->empty(DType::kBF16, {4});
  EXPECT_EQ(c.all_reduce_sum(bf).code(), StatusCode::kUnsupported);
  // A host tensor goes to MPI.
  Tensor hh = Tensor::host(DType::kF32, {1});
  hh.f32()[0] = 3.0f;
  ASSERT_TRUE(c.all_reduce_sum(hh).ok());
  EXPECT_EQ(hh.f32()[0], 3.0f);

  int enqueues = 0, completions = 0;
  for (const auto& e : timeline.snapshot()) {
    if (e.name == "all_reduce enqueue") ++enqueues;
    if (e.name == "all_reduce") ++completions;
  }
  EXPECT_EQ(enqueues, 1);
  EXPECT_EQ(completions, 1);
  EXPECT_FALSE(c.aborted());
}

TEST(NcclSmoke, KernelAfterACollectiveThatWaited) {
  if (!backend::cuda_built()) GTEST_SKIP() << "this dayzero was built without CUDA";
  auto n = backend::cuda_device_count();
  if (!n.ok() || *n == 0) GTEST_SKIP() << "no CUDA device is visible";
  backend::BackendOptions o;
  o.kind = "cuda";
  o.compute_dtype = DType::kF32;
  auto be = backend::make_backend(o);
  ASSERT_TRUE(be.ok()) << be.status().message();
  auto groups = ProcessGroups::create(one_rank_plan(), 0, nullptr);
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  auto nccl = NcclComm::create(groups->mpi_world(), 0, (*be)->device_stream(), nullptr, 30.0);
  ASSERT_TRUE(nccl.ok()) << nccl.status().message();
  // Long work queued ahead of the collective: f32 (pedantic) GEMMs of 4096^3, ~1.1 TFLOP in all,
  // so the wait's first polls find the event not ready.
  constexpr int64_t kN = 4096;
  Tensor hx = Tensor::host(DType::kF32, {kN, kN});
  for (int64_t i = 0; i < kN * kN; ++i) hx.f32()[i] = static_cast<float>(i % 7) * 0.125f;
  Tensor x = (*be)->to_device(hx);
  Tensor y = (*be)->empty(DType::kF32, {kN, kN});
  for (int i = 0; i < 8; ++i) (*be)->matmul(x, x, y, false);
  Tensor h = Tensor::host(DType::kF32, {2, 3});
  for (int i = 0; i < 6; ++i) h.f32()[i] = static_cast<float>(i + 1);
  Tensor d = (*be)->to_device(h);
  ASSERT_TRUE((*nccl)->all_reduce_sum(d).ok());
  // The first kernel after the collective; its launch check aborts the process if the poll's
  // "not ready" were still the thread's last error.
  (*be)->add(d, d);
  Tensor back = Tensor::host(DType::kF32, {2, 3});
  (*be)->to_host(d, back);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.f32()[i], 2.0f * static_cast<float>(i + 1)) << i;
}

}  // namespace
}  // namespace dayzero::comm

int main(int argc, char** argv) {
  dayzero::comm::MpiEnv env(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
