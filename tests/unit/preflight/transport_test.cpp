// Which path preflight's collectives take (src/preflight/transport.h), by the run's rule: MPI on
// host buffers on the CPU; on CUDA, NCCL for the groups that move device tensors when each rank
// drives a GPU of its own (or comm: nccl), MPI staging device buffers through host memory when
// ranks share GPUs (or comm: mpi); the world all-reduce without a run config ruled as such a
// group; backend: cuda refused where a rank sees no GPU, naming it.
#include <gtest/gtest.h>

#include "preflight/transport.h"

namespace dayzero::preflight {
namespace {

using comm::GroupKind;
using config::Backend;
using config::CommKind;

constexpr size_t idx(GroupKind k) { return static_cast<size_t>(k); }

// Four ranks on two nodes, two GPUs each, tp 2 x pp 2 (world, tp, pp, dp, ep, etp).
TransportInputs four_ranks(int gpus_per_rank, bool own_gpus) {
  TransportInputs in;
  in.cuda_built = true;
  in.hosts = {"n0", "n0", "n1", "n1"};
  in.visible_gpus.assign(4, gpus_per_rank);
  for (int r = 0; r < 4; ++r)
    in.gpu_keys.push_back(gpus_per_rank == 0 ? ""
                                             : comm::gpu_key(in.hosts[r], own_gpus ? "0000:1" + std::to_string(r % 2) + ":00.0"
                                                                                   : "0000:10:00.0"));
  in.group_sizes = {4, 2, 2, 1, 1, 1};
  return in;
}

TEST(PreflightTransport, CpuRanksUseMpiOnHostBuffers) {
  for (const Backend b : {Backend::kAuto, Backend::kCpu}) {
    TransportInputs in = four_ranks(b == Backend::kAuto ? 0 : 2, true);
    in.backend = b;
    const auto c = choose_transports(in);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_FALSE(c->cuda);
    EXPECT_EQ(c->backend, "cpu");
    EXPECT_EQ(c->backend_reason, b == Backend::kAuto ? "auto: no CUDA device visible" : "backend: cpu");
    EXPECT_EQ(c->comm, "mpi");
    for (const Transport t : c->transport) EXPECT_EQ(t, Transport::kMpiHost);
  }
  TransportInputs in = four_ranks(2, true);
  in.cuda_built = false;
  const auto c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->backend_reason, "this dayzero was built without CUDA");
  EXPECT_EQ(c->transport[idx(GroupKind::kTp)], Transport::kMpiHost);
}

TEST(PreflightTransport, OwnGpusTakeNcclForTheDeviceGroupsAsTheRunDoes) {
  const auto c = choose_transports(four_ranks(2, true));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->cuda);
  EXPECT_EQ(c->backend_reason, "auto: a CUDA device visible on every rank");
  EXPECT_EQ(c->comm, "nccl (tp, pp; host tensors and the other groups over MPI)");
  EXPECT_EQ(c->transport[idx(GroupKind::kTp)], Transport::kNccl);
  EXPECT_EQ(c->transport[idx(GroupKind::kPp)], Transport::kNccl);
  EXPECT_EQ(c->transport[idx(GroupKind::kWorld)], Transport::kMpiHost);
  // ep of size 1 (no wide expert parallelism): the job moves no tensor over it.
  EXPECT_EQ(c->transport[idx(GroupKind::kEp)], Transport::kMpiStaged);
  EXPECT_STREQ(transport_name(c->transport[idx(GroupKind::kTp)]), "nccl (device buffers)");
}

TEST(PreflightTransport, SharedGpusOrCommMpiStageThroughHostMemory) {
  auto c = choose_transports(four_ranks(1, false));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cuda);
  EXPECT_EQ(c->comm, "mpi (device buffers staged through host memory; ranks share GPUs)");
  EXPECT_EQ(c->transport[idx(GroupKind::kTp)], Transport::kMpiStaged);
  TransportInputs in = four_ranks(2, true);
  in.comm = CommKind::kMpi;
  c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->comm, "mpi (device buffers staged through host memory)");
  EXPECT_EQ(c->transport[idx(GroupKind::kPp)], Transport::kMpiStaged);
  EXPECT_STREQ(transport_name(Transport::kMpiStaged), "mpi (device buffers staged through host memory)");
  // comm: nccl asks for NCCL on shared GPUs too (NcclComm then refuses, naming them).
  in = four_ranks(1, false);
  in.comm = CommKind::kNccl;
  c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->transport[idx(GroupKind::kTp)], Transport::kNccl);
}

TEST(PreflightTransport, WithoutARunConfigTheWorldIsRuledAsADeviceGroup) {
  TransportInputs in = four_ranks(2, true);
  in.group_sizes = {4, 1, 1, 4, 1, 1};  // every rank a replica
  in.world_moves_device_tensors = true;
  auto c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->transport[idx(GroupKind::kWorld)], Transport::kNccl);
  EXPECT_EQ(c->comm, "nccl (world; host tensors and the other groups over MPI)");
  // Negative control: the same gather with the run's rule for the world (host helpers only).
  in.world_moves_device_tensors = false;
  c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->transport[idx(GroupKind::kWorld)], Transport::kMpiHost);
  in = four_ranks(1, false);
  in.group_sizes = {4, 1, 1, 4, 1, 1};
  in.world_moves_device_tensors = true;
  c = choose_transports(in);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->transport[idx(GroupKind::kWorld)], Transport::kMpiStaged);
}

TEST(PreflightTransport, GpusOnSomeRanksOnly) {
  TransportInputs in = four_ranks(1, true);
  in.visible_gpus[3] = 0;
  in.gpu_keys[3] = "";
  auto c = choose_transports(in);  // auto: the CPU, said why
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cuda);
  EXPECT_EQ(c->backend_reason,
            "auto: a CUDA device visible on some ranks only (n0 (ranks 0-1), n1 (rank 2)); the tests ran on the CPU");
  in.backend = Backend::kCuda;  // cuda: refused, naming the rank without one
  c = choose_transports(in);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().exit_code(), 2);
  EXPECT_EQ(c.status().message(), "backend: cuda, but no CUDA device is visible on n1 (rank 3)");
  in = four_ranks(1, true);
  in.backend = Backend::kCuda;
  in.cuda_built = false;
  c = choose_transports(in);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "backend: cuda cannot take effect: this dayzero was built without CUDA");
}

}  // namespace
}  // namespace dayzero::preflight
