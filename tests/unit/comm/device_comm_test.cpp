// Which groups of a CUDA run get an NCCL communicator (comm/device_comm.h): comm: auto from the
// host names and PCI bus ids every rank gathers, so ranks that each see one GPU of their own
// (CUDA_VISIBLE_DEVICES renumbers it to 0 on every rank) still take NCCL while ranks sharing a GPU
// stage through MPI; only tp, pp and ep, the groups that move device tensors; the recorded sentence.
#include <gtest/gtest.h>

#include "comm/device_comm.h"

namespace dayzero::comm {
namespace {

// world, tp, pp, dp, ep, etp
constexpr std::array<int, 6> kOneRank{1, 1, 1, 1, 1, 1};
constexpr std::array<int, 6> kTp8Ep8Dp2{16, 8, 1, 2, 8, 1};
constexpr std::array<int, 6> kTp2Etp2Pp2{4, 2, 2, 1, 1, 2};

int count(const DeviceCommChoice& c) {
  int n = 0;
  for (bool b : c.nccl) n += b ? 1 : 0;
  return n;
}

TEST(DeviceComm, EachRankItsOwnGpuThroughCudaVisibleDevices) {
  // Slurm --gpus-per-task=1: every rank sees one device (index 0), each a different physical GPU.
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back(gpu_key("node-a", "0000:" + std::to_string(0x10 + i) + ":00.0"));
  for (int i = 0; i < 8; ++i) keys.push_back(gpu_key("node-b", "0000:" + std::to_string(0x10 + i) + ":00.0"));
  EXPECT_TRUE(each_rank_owns_a_gpu(keys));
  const DeviceCommChoice c = choose_device_comm(CommRequest::kAuto, keys, kTp8Ep8Dp2);
  EXPECT_TRUE(c.nccl[static_cast<size_t>(GroupKind::kTp)]);
  EXPECT_TRUE(c.nccl[static_cast<size_t>(GroupKind::kEp)]);
  EXPECT_FALSE(c.nccl[static_cast<size_t>(GroupKind::kWorld)]);
  EXPECT_FALSE(c.nccl[static_cast<size_t>(GroupKind::kDp)]);
  EXPECT_EQ(count(c), 2);
  EXPECT_EQ(c.record, "nccl (tp, ep; host tensors and the other groups over MPI)");
}

TEST(DeviceComm, RanksSharingAGpuStageThroughMpi) {
  // Negative control: two ranks of node-a on the same bus id.
  const std::vector<std::string> keys{gpu_key("node-a", "0000:1b:00.0"), gpu_key("node-a", "0000:1b:00.0"),
                                      gpu_key("node-a", "0000:2c:00.0"), gpu_key("node-a", "0000:3d:00.0")};
  EXPECT_FALSE(each_rank_owns_a_gpu(keys));
  const DeviceCommChoice c = choose_device_comm(CommRequest::kAuto, keys, kTp2Etp2Pp2);
  EXPECT_EQ(count(c), 0);
  EXPECT_EQ(c.record, "mpi (device buffers staged through host memory; ranks share GPUs)");
  // The same bus id on two hosts is two GPUs.
  EXPECT_TRUE(each_rank_owns_a_gpu({gpu_key("node-a", "0000:1b:00.0"), gpu_key("node-b", "0000:1b:00.0")}));
  // A rank whose bus id could not be read owns nothing the others can trust.
  EXPECT_FALSE(each_rank_owns_a_gpu({gpu_key("node-a", "0000:1b:00.0"), gpu_key("node-a", "")}));
  EXPECT_FALSE(each_rank_owns_a_gpu({}));
}

TEST(DeviceComm, OnlyGroupsThatMoveDeviceTensors) {
  for (GroupKind k : kGroupKinds)
    EXPECT_EQ(moves_device_tensors(k), k == GroupKind::kTp || k == GroupKind::kPp || k == GroupKind::kEp)
        << group_kind_name(k);
  // etp has two ranks here but carries no device tensor: no communicator for it.
  const std::vector<std::string> keys{"h GPU a", "h GPU b", "h GPU c", "h GPU d"};
  const DeviceCommChoice c = choose_device_comm(CommRequest::kNccl, keys, kTp2Etp2Pp2);
  EXPECT_TRUE(c.nccl[static_cast<size_t>(GroupKind::kTp)]);
  EXPECT_TRUE(c.nccl[static_cast<size_t>(GroupKind::kPp)]);
  EXPECT_FALSE(c.nccl[static_cast<size_t>(GroupKind::kEtp)]);
  EXPECT_FALSE(c.nccl[static_cast<size_t>(GroupKind::kWorld)]);
  EXPECT_EQ(count(c), 2);
  EXPECT_EQ(c.record, "nccl (tp, pp; host tensors and the other groups over MPI)");
}

TEST(DeviceComm, OneRankRecordsNoComm) {
  const DeviceCommChoice c = choose_device_comm(CommRequest::kAuto, {"h GPU a"}, kOneRank);
  EXPECT_EQ(count(c), 0);
  EXPECT_EQ(c.record, "none (one rank)");
  EXPECT_EQ(choose_device_comm(CommRequest::kMpi, {"h GPU a"}, kOneRank).record, "none (one rank)");
}

TEST(DeviceComm, RequestsAreHonoured) {
  const std::vector<std::string> own{"h GPU a", "h GPU b", "h GPU c", "h GPU d"};
  // comm: mpi stages even where every rank owns a GPU, and does not claim they share one.
  const DeviceCommChoice m = choose_device_comm(CommRequest::kMpi, own, kTp2Etp2Pp2);
  EXPECT_EQ(count(m), 0);
  EXPECT_EQ(m.record, "mpi (device buffers staged through host memory)");
  // comm: nccl is taken even where ranks share a GPU (NcclComm::create then refuses it, naming them).
  const DeviceCommChoice n = choose_device_comm(CommRequest::kNccl, {"h GPU a", "h GPU a", "h GPU c", "h GPU d"},
                                                kTp2Etp2Pp2);
  EXPECT_EQ(count(n), 2);
  // Data parallel only: NCCL would be taken, but no group moves device tensors across ranks.
  const DeviceCommChoice d = choose_device_comm(CommRequest::kAuto, {"h GPU a", "h GPU b"}, {2, 1, 1, 2, 1, 1});
  EXPECT_EQ(count(d), 0);
  EXPECT_EQ(d.record, "none (no group that moves device tensors has more than one rank)");
}

}  // namespace
}  // namespace dayzero::comm
