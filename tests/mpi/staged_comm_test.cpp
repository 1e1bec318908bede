// StagedComm on 2 ranks over the world's MpiComm, with "device" tensors that are host memory
// reporting a CUDA device (so this runs without a GPU): every collective and the p2p pair give
// the values MPI gives host tensors, each staged input is copied out once and each output
// back once, and the negative control (the MPI Comm itself) refuses the same tensors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "comm/groups.h"
#include "comm/mpi_env.h"
#include "comm/staged_comm.h"

namespace dayzero::comm {
namespace {

class FakeDeviceStorage final : public Storage {
 public:
  explicit FakeDeviceStorage(size_t bytes) : buf_(bytes) {}
  void* data() override { return buf_.data(); }
  size_t bytes() const override { return buf_.size(); }
  Device device() const override { return {DeviceKind::kCuda, 0}; }

 private:
  std::vector<char> buf_;
};

Tensor fake_device(DType dt, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dt);
  return Tensor(dt, std::move(shape), std::make_shared<FakeDeviceStorage>(bytes));
}
float* fp(Tensor& t) { return static_cast<float*>(t.data()); }

struct Counts {
  int to_host = 0, to_device = 0;
};

DeviceStaging counting_staging(Counts* c) {
  return {[c](const Tensor& t) {
            ++c->to_host;
            Tensor h = Tensor::host(t.dtype(), t.shape());
            std::memcpy(h.data(), t.data(), t.bytes());
            return h;
          },
          [c](const Tensor& h, Tensor& dst) {
            ++c->to_device;
            DZ_CHECK(h.bytes() == dst.bytes());
            std::memcpy(dst.data(), h.data(), h.bytes());
          }};
}

plan::Plan world_plan(int n) {
  plan::Plan p;
  p.tp = n;
  p.etp = n;
  p.world_size = n;
  for (int r = 0; r < n; ++r) {
    plan::RankCoord c;
    c.rank = r;
    c.tp_rank = r;
    c.etp_rank = r;
    p.ranks.push_back(c);
  }
  return p;
}

class StagedCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    auto g = ProcessGroups::create(world_plan(size), rank_, nullptr);
    ASSERT_TRUE(g.ok()) << g.status().message();
    groups_ = std::make_unique<ProcessGroups>(std::move(g).value());
    groups_->wrap([this](MpiComm& m) { return std::make_unique<StagedComm>(m, counting_staging(&counts_)); });
  }
  int rank_ = 0;
  Counts counts_;
  std::unique_ptr<ProcessGroups> groups_;
};

TEST_F(StagedCommTest, AllReduceOfDeviceTensorStagesOnceEachWay) {
  Comm& tp = groups_->tp();
  ASSERT_EQ(tp.size(), 2);
  Tensor t = fake_device(DType::kF32, {3});
  for (int i = 0; i < 3; ++i) fp(t)[i] = static_cast<float>(rank_ * 10 + i);
  ASSERT_TRUE(tp.all_reduce_sum(t).ok());
  EXPECT_EQ(fp(t)[0], 10.0f);  // 0 + 10
  EXPECT_EQ(fp(t)[2], 14.0f);  // 2 + 12
  EXPECT_EQ(counts_.to_host, 1);
  EXPECT_EQ(counts_.to_device, 1);
  // Negative control: the MPI Comm behind it refuses a device tensor.
  const Status direct = groups_->mpi_tp().all_reduce_sum(t);
  EXPECT_EQ(direct.code(), StatusCode::kUnsupported) << direct.message();
}

TEST_F(StagedCommTest, GatherScatterBroadcastAndP2p) {
  Comm& tp = groups_->tp();
  Tensor in = fake_device(DType::kF32, {2, 2});
  for (int i = 0; i < 4; ++i) fp(in)[i] = static_cast<float>(rank_ * 100 + i);
  Tensor out = fake_device(DType::kF32, {4, 2});
  ASSERT_TRUE(tp.all_gather(in, out).ok());
  EXPECT_EQ(fp(out)[1], 1.0f);
  EXPECT_EQ(fp(out)[5], 101.0f);

  Tensor rs_out = fake_device(DType::kF32, {1, 2});
  ASSERT_TRUE(tp.reduce_scatter_sum(in, rs_out).ok());
  // Block rank_ of the sum: rows rank_ of (in_0 + in_1).
  EXPECT_EQ(fp(rs_out)[0], static_cast<float>(100 + 2 * (2 * rank_)));

  Tensor b = fake_device(DType::kF32, {2});
  fp(b)[0] = static_cast<float>(rank_ + 7);
  ASSERT_TRUE(tp.broadcast(b, 1).ok());
  EXPECT_EQ(fp(b)[0], 8.0f);

  Tensor msg = fake_device(DType::kF32, {2});
  if (rank_ == 0) {
    fp(msg)[0] = 42.0f;
    ASSERT_TRUE(tp.send(msg, 1, 5).ok());
  } else {
    ASSERT_TRUE(tp.recv(msg, 0, 5).ok());
    EXPECT_EQ(fp(msg)[0], 42.0f);
  }
  // A host tensor passes through without staging.
  const int before = counts_.to_host + counts_.to_device;
  Tensor h = Tensor::host(DType::kF32, {1});
  static_cast<float*>(h.data())[0] = 1.0f;
  ASSERT_TRUE(tp.all_reduce_sum(h).ok());
  EXPECT_EQ(static_cast<float*>(h.data())[0], 2.0f);
  EXPECT_EQ(counts_.to_host + counts_.to_device, before);
}

TEST_F(StagedCommTest, FailedCallLeavesDeviceTensorUntouched) {
  Comm& tp = groups_->tp();
  Tensor in = fake_device(DType::kF32, {2, 2});
  Tensor wrong = fake_device(DType::kF32, {3, 2});  // all_gather needs [4, 2]
  fp(wrong)[0] = -1.0f;
  const Status s = tp.all_gather(in, wrong);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(fp(wrong)[0], -1.0f);
}

}  // namespace
}  // namespace dayzero::comm

int main(int argc, char** argv) {
  int failed_anywhere = 1;
  {
    dayzero::comm::MpiEnv env(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (env.rank() == 0 && failed_anywhere && !failed_here) std::fprintf(stderr, "FAILED on another rank\n");
  }
  return failed_anywhere;
}
