// ProcessGroups and MpiComm on 4 ranks: group sizes, coordinates and members for several
// plans; every collective against hand-computed values; deterministic sums (bit-identical on
// every rank and from call to call); argmax tie-breaks; the timeline events and the event log
// line a blocked rank leaves behind. Own main: every rank agrees on the verdict.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/groups.h"
#include "comm/mpi_env.h"
#include "dump/event_log.h"
#include "dump/timeline.h"

namespace dayzero::comm {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A plan with the documented rank order: rank = ((dp*pp)+pp)*tp + tp, tp = ep*etp + etp.
plan::Plan make_plan(int dp, int pp, int tp, int ep = 1) {
  plan::Plan p;
  p.dp = dp;
  p.pp = pp;
  p.tp = tp;
  p.ep = ep;
  p.etp = tp / ep;
  p.world_size = dp * pp * tp;
  for (int r = 0; r < p.world_size; ++r) {
    plan::RankCoord c;
    c.rank = r;
    c.tp_rank = r % tp;
    c.pp_rank = (r / tp) % pp;
    c.dp_rank = r / (tp * pp);
    c.ep_rank = c.tp_rank / p.etp;
    c.etp_rank = c.tp_rank % p.etp;
    p.ranks.push_back(c);
  }
  return p;
}

ProcessGroups make_groups(const plan::Plan& p, dump::Timeline* timeline = nullptr) {
  auto g = ProcessGroups::create(p, world_rank(), timeline);
  DZ_CHECK(g.ok(), g.status().message());
  return std::move(g).value();
}

Tensor f32(Shape shape) { return Tensor::host(DType::kF32, std::move(shape)); }
int32_t* i32p(Tensor& t) { return static_cast<int32_t*>(t.data()); }

// The world ranks of the group `axis` that contains `me`, ordered by the group rank.
std::vector<int32_t> expected_members(const plan::Plan& p, int me, const std::string& axis) {
  const plan::RankCoord& m = p.ranks[me];
  std::vector<std::pair<int, int32_t>> members;  // (axis coordinate, world rank)
  for (const plan::RankCoord& c : p.ranks) {
    if (axis == "world") members.push_back({c.rank, c.rank});
    if (axis == "tp" && c.dp_rank == m.dp_rank && c.pp_rank == m.pp_rank) members.push_back({c.tp_rank, c.rank});
    if (axis == "pp" && c.dp_rank == m.dp_rank && c.tp_rank == m.tp_rank) members.push_back({c.pp_rank, c.rank});
    if (axis == "dp" && c.pp_rank == m.pp_rank && c.tp_rank == m.tp_rank) members.push_back({c.dp_rank, c.rank});
    if (axis == "ep" && c.dp_rank == m.dp_rank && c.pp_rank == m.pp_rank && c.etp_rank == m.etp_rank)
      members.push_back({c.ep_rank, c.rank});
    if (axis == "etp" && c.dp_rank == m.dp_rank && c.pp_rank == m.pp_rank && c.ep_rank == m.ep_rank)
      members.push_back({c.etp_rank, c.rank});
  }
  std::sort(members.begin(), members.end());
  std::vector<int32_t> out;
  for (auto& [k, r] : members) out.push_back(r);
  return out;
}

// The world ranks of comm's members, gathered through comm itself.
std::vector<int32_t> gathered_members(Comm& comm) {
  Tensor in = Tensor::host(DType::kI32, {1});
  Tensor out = Tensor::host(DType::kI32, {comm.size()});
  i32p(in)[0] = world_rank();
  EXPECT_TRUE(comm.all_gather(in, out).ok());
  return std::vector<int32_t>(i32p(out), i32p(out) + comm.size());
}

struct PlanCase {
  int dp, pp, tp, ep;
};

TEST(ProcessGroups, SizesCoordinatesAndMembers) {
  const PlanCase cases[] = {{1, 1, 4, 1}, {1, 2, 2, 1}, {2, 1, 2, 1}, {1, 4, 1, 1},
                            {1, 1, 4, 2}, {1, 1, 4, 4}, {2, 2, 1, 1}};
  const int me = world_rank();
  for (const PlanCase& pc : cases) {
    SCOPED_TRACE("plan dp" + std::to_string(pc.dp) + " pp" + std::to_string(pc.pp) + " tp" +
                 std::to_string(pc.tp) + " ep" + std::to_string(pc.ep) + ", rank " +
                 std::to_string(me));
    const plan::Plan p = make_plan(pc.dp, pc.pp, pc.tp, pc.ep);
    ProcessGroups g = make_groups(p);
    const plan::RankCoord& c = p.ranks[me];
    EXPECT_EQ(g.coord().rank, me);
    EXPECT_EQ(g.world().size(), 4);
    EXPECT_EQ(g.world().rank(), me);
    EXPECT_EQ(g.tp().size(), pc.tp);
    EXPECT_EQ(g.tp().rank(), c.tp_rank);
    EXPECT_EQ(g.pp().size(), pc.pp);
    EXPECT_EQ(g.pp().rank(), c.pp_rank);
    EXPECT_EQ(g.dp().size(), pc.dp);
    EXPECT_EQ(g.dp().rank(), c.dp_rank);
    EXPECT_EQ(g.ep().size(), pc.ep);
    EXPECT_EQ(g.ep().rank(), c.ep_rank);
    EXPECT_EQ(g.etp().size(), pc.tp / pc.ep);
    EXPECT_EQ(g.etp().rank(), c.etp_rank);
    const std::string pp = "pp" + std::to_string(c.pp_rank), dp = "dp" + std::to_string(c.dp_rank),
                      tp = "tp" + std::to_string(c.tp_rank);
    EXPECT_EQ(g.world().label(), "world");
    EXPECT_EQ(g.tp().label(), "tp@" + pp + "." + dp);
    EXPECT_EQ(g.pp().label(), "pp@" + dp + "." + tp);
    EXPECT_EQ(g.dp().label(), "dp@" + pp + "." + tp);
    EXPECT_EQ(g.ep().label(), "ep@" + pp + "." + dp + ".etp" + std::to_string(c.etp_rank));
    EXPECT_EQ(g.etp().label(), "etp@" + pp + "." + dp + ".ep" + std::to_string(c.ep_rank));
    EXPECT_EQ(g.tp().name(), "tp");
    EXPECT_EQ(g.etp().name(), "etp");
    for (const char* axis : {"world", "tp", "pp", "dp", "ep", "etp"}) {
      Comm& comm = std::string(axis) == "world" ? g.world()
                   : std::string(axis) == "tp"  ? g.tp()
                   : std::string(axis) == "pp"  ? g.pp()
                   : std::string(axis) == "dp"  ? g.dp()
                   : std::string(axis) == "ep"  ? g.ep()
                                                : g.etp();
      EXPECT_EQ(gathered_members(comm), expected_members(p, me, axis)) << "group " << axis;
    }
  }
}

// Wide expert parallelism: an expert group of ep_dp replicas (ep = ep_dp x tp, etp = 1).
TEST(ProcessGroups, WideExpertGroupsSpanReplicas) {
  const int me = world_rank();
  struct Wide {
    int dp, pp, tp, ep_dp;
  };
  for (const Wide& w : {Wide{4, 1, 1, 4}, Wide{2, 2, 1, 2}, Wide{2, 1, 2, 2}, Wide{4, 1, 1, 2}}) {
    plan::Plan p = make_plan(w.dp, w.pp, w.tp, w.tp);
    p.ep_dp = w.ep_dp;
    p.ep = w.ep_dp * w.tp;
    for (plan::RankCoord& c : p.ranks) c.ep_rank = (c.dp_rank % w.ep_dp) * w.tp + c.tp_rank;
    ProcessGroups g = make_groups(p);
    const plan::RankCoord& c = p.ranks[me];
    SCOPED_TRACE("dp" + std::to_string(w.dp) + " pp" + std::to_string(w.pp) + " tp" + std::to_string(w.tp) + " ep_dp" +
                 std::to_string(w.ep_dp));
    EXPECT_EQ(g.ep().size(), p.ep);
    EXPECT_EQ(g.ep().rank(), c.ep_rank);
    EXPECT_EQ(g.tp().rank(), c.tp_rank);
    EXPECT_EQ(g.dp().rank(), c.dp_rank);
    EXPECT_EQ(g.pp().rank(), c.pp_rank);
    // Members: same stage, the ep_dp replicas of this group, in ep_rank order.
    std::vector<int32_t> want(static_cast<size_t>(p.ep));
    for (const plan::RankCoord& o : p.ranks)
      if (o.pp_rank == c.pp_rank && o.dp_rank / w.ep_dp == c.dp_rank / w.ep_dp) want[o.ep_rank] = o.rank;
    EXPECT_EQ(gathered_members(g.ep()), want);
    const int first = c.dp_rank / w.ep_dp * w.ep_dp;
    EXPECT_EQ(g.ep().label(), "ep@pp" + std::to_string(c.pp_rank) + ".dp" + std::to_string(first) + "-" +
                                  std::to_string(first + w.ep_dp - 1) + ".etp0");
  }
}

TEST(MpiComm, AllToAllvMovesRowsByCount) {
  // Rank s sends s + r rows to rank r, each row [s, r, i, 0]: rank r receives s + r rows from
  // every s, in rank order.
  ProcessGroups g = make_groups(make_plan(1, 1, 4));
  const int me = g.world().rank(), n = g.world().size();
  std::vector<int64_t> send(n), recv(n);
  int64_t total_send = 0, total_recv = 0;
  for (int r = 0; r < n; ++r) send[r] = me + r, recv[r] = r + me, total_send += send[r], total_recv += recv[r];
  Tensor in = f32({total_send, 4}), out = f32({total_recv, 4});
  int64_t row = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < send[r]; ++i, ++row) {
      in.f32()[row * 4] = static_cast<float>(me);
      in.f32()[row * 4 + 1] = static_cast<float>(r);
      in.f32()[row * 4 + 2] = static_cast<float>(i);
    }
  ASSERT_TRUE(g.world().all_to_allv(in, send, out, recv, "dispatch").ok());
  row = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < recv[s]; ++i, ++row) {
      EXPECT_EQ(out.f32()[row * 4], s);
      EXPECT_EQ(out.f32()[row * 4 + 1], me);
      EXPECT_EQ(out.f32()[row * 4 + 2], i);
    }
  // Counts that do not add up to the tensors are refused before any communication.
  Tensor wrong = f32({total_recv + 1, 4});
  const Status bad = g.world().all_to_allv(in, send, wrong, recv, "combine");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("combine (all_to_allv) over world"), std::string::npos) << bad.message();
}

TEST(ProcessGroups, PlansThatDisagreeWithMpiFailOnEveryRank) {
  // Wrong world size: the same verdict everywhere, before any communicator is built.
  auto too_big = ProcessGroups::create(make_plan(2, 2, 2), world_rank(), nullptr);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("MPI started 4"), std::string::npos)
      << too_big.status().message();

  plan::Plan bad_ep = make_plan(1, 1, 4, 2);
  bad_ep.etp = 1;
  auto ep = ProcessGroups::create(bad_ep, world_rank(), nullptr);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("must equal tp 4"), std::string::npos)
      << ep.status().message();

  // tp-major coordinates where the plan's order is tp-fastest: found by the ranks whose
  // coordinates differ, and reported on all ranks.
  plan::Plan swapped = make_plan(1, 2, 2);
  for (plan::RankCoord& c : swapped.ranks) std::swap(c.pp_rank, c.tp_rank);
  auto sw = ProcessGroups::create(swapped, world_rank(), nullptr);
  ASSERT_FALSE(sw.ok());
  EXPECT_EQ(sw.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sw.status().message().find("rank 1"), std::string::npos) << sw.status().message();
  EXPECT_NE(sw.status().message().find("Cartesian"), std::string::npos) << sw.status().message();

  // Groups still build afterwards (nothing was left half-made).
  ProcessGroups g = make_groups(make_plan(1, 1, 4));
  EXPECT_EQ(g.tp().size(), 4);
}

// x_r[i]: values whose float sum depends on the order they are added in.
float term(int r, int64_t i) {
  static const float kBig[4] = {1e8f, 1.0f, -1e8f, 3.14159f};
  return kBig[r] * static_cast<float>(i % 3 + 1) + 0.001f * static_cast<float>(i) + 0.1f * r;
}

// ((x_0 + x_1) + x_2) + ... over the given group members (rank order).
float rank_order_sum(const std::vector<int>& terms_of, int64_t i) {
  float acc = term(terms_of[0], i);
  for (size_t s = 1; s < terms_of.size(); ++s) acc += term(terms_of[s], i);
  return acc;
}

TEST(MpiComm, AllReduceSumIsTheRankOrderSum) {
  ProcessGroups g = make_groups(make_plan(1, 2, 2));  // tp groups {0,1} and {2,3}
  const int me = world_rank();
  // numel 15 over 4 ranks: uneven chunks; numel 2 < size: empty chunks; numel 0.
  for (int64_t n : {15, 2, 0, 1024}) {
    SCOPED_TRACE("numel " + std::to_string(n));
    Tensor w = f32({n});
    for (int64_t i = 0; i < n; ++i) w.f32()[i] = term(me, i);
    ASSERT_TRUE(g.world().all_reduce_sum(w).ok());
    for (int64_t i = 0; i < n; ++i) {
      const float want = rank_order_sum({0, 1, 2, 3}, i);
      ASSERT_EQ(std::memcmp(&w.f32()[i], &want, 4), 0)
          << "i " << i << ": " << w.f32()[i] << " vs " << want;
    }
  }
  // On a tp group of a 2-stage plan: [n_tokens 3, n_embd 5].
  Tensor t = f32({3, 5});
  for (int64_t i = 0; i < 15; ++i) t.f32()[i] = term(me, i);
  ASSERT_TRUE(g.tp().all_reduce_sum(t).ok());
  const std::vector<int> members = me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(t.f32()[i], rank_order_sum(members, i)) << "i " << i;

  // i32 sums.
  Tensor k = Tensor::host(DType::kI32, {2, 3});
  for (int i = 0; i < 6; ++i) i32p(k)[i] = (me + 1) * 10 + i;
  ASSERT_TRUE(g.world().all_reduce_sum(k).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(i32p(k)[i], 100 + 4 * i);

  // A 1-rank group leaves t as it is.
  ProcessGroups solo = make_groups(make_plan(1, 4, 1));
  Tensor s = f32({4});
  s.f32()[0] = -0.0f;
  s.f32()[1] = 7.5f;
  ASSERT_TRUE(solo.tp().all_reduce_sum(s).ok());
  EXPECT_TRUE(std::signbit(s.f32()[0]));
  EXPECT_EQ(s.f32()[1], 7.5f);
}

TEST(MpiComm, AllReduceSumIsBitIdenticalAcrossRanksAndCalls) {
  ProcessGroups g = make_groups(make_plan(1, 1, 4));
  const int me = world_rank();
  const uint32_t seed = 1234u + static_cast<uint32_t>(me);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 100.f);
  const int64_t n = 7 * 96 + 3;  // [n_tokens 7, n_embd 96] plus an uneven tail
  Tensor input = f32({n});
  for (int64_t i = 0; i < n; ++i) input.f32()[i] = normal(rng) * std::pow(10.f, float(i % 7) - 3);
  auto sum_once = [&] {
    Tensor t = f32({n});
    std::memcpy(t.data(), input.data(), input.bytes());
    EXPECT_TRUE(g.tp().all_reduce_sum(t).ok());
    return t;
  };
  Tensor a = sum_once(), b = sum_once();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << "seed " << seed;
  // Every rank's result byte for byte.
  std::vector<float> all(static_cast<size_t>(4 * n));
  const int count = static_cast<int>(n);
  MPI_Allgather(a.data(), count, MPI_FLOAT, all.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(std::memcmp(all.data(), all.data() + r * n, a.bytes()), 0)
        << "rank " << r << " differs (seed of rank 0: 1234)";

  // reduce_scatter then all_gather is the same sum, bit for bit (n padded to a multiple of 4).
  const int64_t rows = 4 * 10;
  Tensor in = f32({rows, 7});
  for (int64_t i = 0; i < in.numel(); ++i) in.f32()[i] = input.f32()[i];
  Tensor reduced = f32({rows, 7});
  std::memcpy(reduced.data(), in.data(), in.bytes());
  ASSERT_TRUE(g.tp().all_reduce_sum(reduced).ok());
  Tensor block = f32({rows / 4, 7}), gathered = f32({rows, 7});
  ASSERT_TRUE(g.tp().reduce_scatter_sum(in, block).ok());
  ASSERT_TRUE(g.tp().all_gather(block, gathered).ok());
  EXPECT_EQ(std::memcmp(gathered.data(), reduced.data(), reduced.bytes()), 0);
}

TEST(MpiComm, AllGatherConcatenatesInRankOrder) {
  ProcessGroups g = make_groups(make_plan(2, 1, 2));  // tp {0,1} {2,3}; dp {0,2} {1,3}
  const int me = world_rank();
  Tensor in = f32({2, 3});
  for (int i = 0; i < 6; ++i) in.f32()[i] = float(me * 100 + i);
  Tensor out = f32({8, 3});
  ASSERT_TRUE(g.world().all_gather(in, out).ok());
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out.f32()[r * 6 + i], float(r * 100 + i));

  Tensor dp_out = f32({4, 3});
  ASSERT_TRUE(g.dp().all_gather(in, dp_out).ok());
  const int first = me % 2;  // dp group {first, first + 2}
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(dp_out.f32()[i], float(first * 100 + i));
    EXPECT_EQ(dp_out.f32()[6 + i], float((first + 2) * 100 + i));
  }
}

TEST(MpiComm, ReduceScatterGivesThisRanksBlockOfTheSum) {
  ProcessGroups g = make_groups(make_plan(1, 1, 4));
  const int me = world_rank();
  Tensor in = Tensor::host(DType::kI32, {8, 3});  // 4 blocks of [2, 3]
  for (int i = 0; i < 24; ++i) i32p(in)[i] = me * 1000 + i;
  Tensor out = Tensor::host(DType::kI32, {2, 3});
  ASSERT_TRUE(g.tp().reduce_scatter_sum(in, out).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(i32p(out)[i], 6000 + 4 * (me * 6 + i)) << "i " << i;

  Tensor fin = f32({8, 3}), fout = f32({2, 3});
  for (int i = 0; i < 24; ++i) fin.f32()[i] = term(me, i);
  ASSERT_TRUE(g.tp().reduce_scatter_sum(fin, fout).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(fout.f32()[i], rank_order_sum({0, 1, 2, 3}, me * 6 + i));
}

TEST(MpiComm, BroadcastCopiesTheRootsTensor) {
  ProcessGroups g = make_groups(make_plan(1, 2, 2));
  const int me = world_rank();
  Tensor t = f32({4});
  for (int i = 0; i < 4; ++i) t.f32()[i] = float(me * 10 + i);
  ASSERT_TRUE(g.world().broadcast(t, 2).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.f32()[i], float(20 + i));

  Tensor u = Tensor::host(DType::kI32, {3});
  for (int i = 0; i < 3; ++i) i32p(u)[i] = me * 10 + i;
  ASSERT_TRUE(g.tp().broadcast(u, 1).ok());  // tp rank 1 is world rank 1 or 3
  const int root_world = me < 2 ? 1 : 3;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(i32p(u)[i], root_world * 10 + i);
}

TEST(MpiComm, SendRecvAlongThePipeline) {
  ProcessGroups g = make_groups(make_plan(1, 4, 1));
  Comm& pp = g.pp();
  // Stage s receives from s-1, adds its stage number, passes it on.
  Tensor h = f32({2, 3});  // [n_tokens, n_embd]
  if (pp.rank() == 0) {
    for (int i = 0; i < 6; ++i) h.f32()[i] = float(i);
  } else {
    ASSERT_TRUE(pp.recv(h, pp.rank() - 1, 5).ok());
  }
  for (int i = 0; i < 6; ++i) h.f32()[i] += float(pp.rank());
  if (pp.rank() + 1 < pp.size()) {
    ASSERT_TRUE(pp.send(h, pp.rank() + 1, 5).ok());
  }
  if (pp.rank() == 3) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(h.f32()[i], float(i + 0 + 1 + 2 + 3));
  }

  // A message of the wrong size is drained and reported by the receiver.
  if (pp.rank() == 0) {
    ASSERT_TRUE(pp.send(f32({5}), 1, 9).ok());
  }
  if (pp.rank() == 1) {
    Tensor small = f32({4});
    const Status s = pp.recv(small, 0, 9);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("the message has 20"), std::string::npos) << s.message();
  }
  // Arguments no peer could match are refused before any communication.
  EXPECT_EQ(pp.send(h, pp.rank(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pp.send(h, 4, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pp.recv(h, (pp.rank() + 1) % 4, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(pp.barrier().ok());
}

TEST(MpiComm, AllReduceMaxInt) {
  ProcessGroups g = make_groups(make_plan(1, 2, 2));
  const int me = world_rank();
  int64_t v[3] = {me, -me, int64_t{1} << (40 + me)};
  ASSERT_TRUE(g.world().all_reduce_max_int(v, 3).ok());
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[2], int64_t{1} << 43);
  int64_t w[1] = {me};
  ASSERT_TRUE(g.tp().all_reduce_max_int(w, 1).ok());
  EXPECT_EQ(w[0], me < 2 ? 1 : 3);
}

TEST(MpiComm, ArgmaxAcrossPrefersTheLowestIndexOnTies) {
  ProcessGroups g = make_groups(make_plan(1, 1, 4));
  Comm& tp = g.tp();
  const int me = world_rank();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float v = 0;
  int64_t idx = -1;
  // All equal: the lowest index wins, whichever rank holds it.
  const int64_t tie_index[4] = {30, 12, 7, 50};
  ASSERT_TRUE(tp.argmax_across(5.0f, tie_index[me], &v, &idx).ok());
  EXPECT_EQ(v, 5.0f);
  EXPECT_EQ(idx, 7);
  // A strict maximum wins over lower indices.
  const float vals[4] = {1.f, 9.f, 9.f, 2.f};
  ASSERT_TRUE(tp.argmax_across(vals[me], 100 + me, &v, &idx).ok());
  EXPECT_EQ(v, 9.f);
  EXPECT_EQ(idx, 101);
  // NaN never wins against a number; all NaN gives the lowest index.
  ASSERT_TRUE(tp.argmax_across(me == 0 ? nan : -float(me), me, &v, &idx).ok());
  EXPECT_EQ(idx, 1);
  EXPECT_EQ(v, -1.f);
  ASSERT_TRUE(tp.argmax_across(nan, 10 - me, &v, &idx).ok());
  EXPECT_EQ(idx, 7);
  EXPECT_TRUE(std::isnan(v));
}

TEST(MpiComm, BadArgumentsAreRefusedBeforeAnyCommunication) {
  dump::Timeline timeline;
  ProcessGroups g = make_groups(make_plan(1, 1, 4), &timeline);
  Tensor in = f32({2, 3}), wrong = f32({6, 3});
  Status s = g.tp().all_gather(in, wrong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("all_gather over tp@pp0.dp0"), std::string::npos) << s.message();
  Tensor bf16 = Tensor::host(DType::kBF16, {4});
  EXPECT_EQ(g.tp().all_reduce_sum(bf16).code(), StatusCode::kUnsupported);
  Tensor undefined;
  EXPECT_EQ(g.tp().broadcast(undefined, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.tp().broadcast(in, 4).code(), StatusCode::kInvalidArgument);
  Tensor rs_out = f32({2, 3});
  EXPECT_EQ(g.tp().reduce_scatter_sum(f32({6, 3}), rs_out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.tp().next_seq(), 0);
  EXPECT_TRUE(timeline.snapshot().empty());
}

// A fresh directory every rank sees (rank 0 makes it), removed at the end.
class SharedDir {
 public:
  SharedDir() {
    std::string made;
    if (world_rank() == 0) {
      char tmpl[] = "/tmp/dz-comm-test-XXXXXX";
      DZ_CHECK(mkdtemp(tmpl) != nullptr);
      made = tmpl;
    }
    path_ = broadcast_string(made);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(path_);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<nlohmann::json> read_complete_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line still being written
    out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

std::string log_path(const SharedDir& dir, int rank) {
  return dir.file("rank-0000" + std::to_string(rank) + ".jsonl");
}

TEST(MpiComm, TimelineRecordsGroupSeqAndBytes) {
  SharedDir dir;
  const int me = world_rank();
  auto log = dump::EventLog::open(log_path(dir, me));
  ASSERT_TRUE(log.ok()) << log.status().message();
  dump::Timeline timeline(log->get());
  ProcessGroups g = make_groups(make_plan(1, 2, 2), &timeline);
  const int pp = me / 2, tp = me % 2;
  Tensor t = f32({3, 4});
  Tensor gathered = f32({6, 4});
  ASSERT_TRUE(g.tp().all_reduce_sum(t).ok());
  ASSERT_TRUE(g.pp().broadcast(t, 0).ok());
  ASSERT_TRUE(g.tp().all_reduce_sum(t).ok());
  ASSERT_TRUE(g.world().barrier().ok());
  ASSERT_TRUE(g.tp().all_gather(t, gathered).ok());
  if (pp == 0) {
    ASSERT_TRUE(g.pp().send(t, 1, 3).ok());
  }
  if (pp == 1) {
    ASSERT_TRUE(g.pp().recv(t, 0, 3).ok());
  }
  EXPECT_EQ(g.tp().current_op(), nullptr);
  EXPECT_EQ(g.tp().next_seq(), 3);

  const std::string tp_label = "tp@pp" + std::to_string(pp) + ".dp0";
  const std::string pp_label = "pp@dp0.tp" + std::to_string(tp);
  struct Want {
    const char *kind, *name;
    std::string group;
    int64_t seq, bytes;
  };
  const std::vector<Want> want = {
      {"collective", "all_reduce", tp_label, 0, 48},
      {"collective", "broadcast", pp_label, 0, 48},
      {"collective", "all_reduce", tp_label, 1, 48},
      {"collective", "barrier", "world", 0, 0},
      {"collective", "all_gather", tp_label, 2, 96},
      {"p2p", pp == 0 ? "send" : "recv", pp_label, 1, 48},
  };
  const auto& ev = timeline.snapshot();
  ASSERT_EQ(ev.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    EXPECT_EQ(ev[i].kind, want[i].kind);
    EXPECT_EQ(ev[i].name, want[i].name);
    EXPECT_EQ(ev[i].group, want[i].group);
    EXPECT_EQ(ev[i].seq, want[i].seq);
    EXPECT_EQ(ev[i].bytes, want[i].bytes);
    EXPECT_GE(ev[i].t_end_ns, ev[i].t_begin_ns);
  }
  // The log: a begin then an end per call, with the same fields.
  const auto lines = read_complete_lines(log_path(dir, me));
  ASSERT_EQ(lines.size(), 2 * want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(lines[2 * i]["ev"], "begin");
    EXPECT_EQ(lines[2 * i + 1]["ev"], "end");
    EXPECT_EQ(lines[2 * i]["name"], want[i].name);
    EXPECT_EQ(lines[2 * i]["group"], want[i].group);
    EXPECT_EQ(lines[2 * i]["seq"], want[i].seq);
    EXPECT_EQ(lines[2 * i + 1]["seq"], want[i].seq);
  }
}

// Rank 1 blocks in recv; rank 0 sends only once rank 1's event log shows the begin of that
// recv and another thread of rank 1 has seen current_op() == "recv". So both are visible
// while a rank is stuck inside the call.
TEST(MpiComm, ABlockedRankShowsWhereItIs) {
  SharedDir dir;
  const int me = world_rank();
  auto log = dump::EventLog::open(log_path(dir, me));
  ASSERT_TRUE(log.ok()) << log.status().message();
  dump::Timeline timeline(log->get());
  ProcessGroups g = make_groups(make_plan(1, 1, 4), &timeline);
  Comm& world = g.world();
  const std::string seen_marker = dir.file("rank1-saw-recv");
  Tensor t = f32({8});
  if (me == 1) {
    std::atomic<bool> saw{false};
    std::thread watcher([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < until) {
        const char* op = world.current_op();
        if (op != nullptr && std::strcmp(op, "recv") == 0) {
          saw = true;
          std::ofstream(seen_marker) << "recv\n";
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    const Status s = world.recv(t, 0, 11);
    watcher.join();
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(saw.load());
    EXPECT_EQ(t.f32()[7], 42.f);
    EXPECT_EQ(world.current_op(), nullptr);
  } else if (me == 0) {
    bool logged = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      for (const auto& line : read_complete_lines(log_path(dir, 1)))
        if (line.is_object() && line.value("ev", "") == "begin" &&
            line.value("name", "") == "recv" && line.value("group", "") == "world" &&
            line.value("kind", "") == "p2p")
          logged = true;
      if (logged && std::filesystem::exists(seen_marker)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_TRUE(logged) << "rank 1's event log has no begin line for its recv";
    EXPECT_TRUE(std::filesystem::exists(seen_marker)) << "rank 1 never showed current_op recv";
    t.f32()[7] = 42.f;
    ASSERT_TRUE(world.send(t, 1, 11).ok());  // sent in any case, so rank 1 never hangs
  }
}

// Ranks other than 0 print only their failures, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace dayzero::comm

int main(int argc, char** argv) {
  int failed_anywhere = 1;
  {
    dayzero::comm::MpiEnv env(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    if (env.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new dayzero::comm::FailurePrinter(env.rank()));
    }
    int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
    MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (env.rank() == 0 && failed_anywhere && !failed_here)
      std::fprintf(stderr, "FAILED on another rank (see [rank N] lines)\n");
  }
  return failed_anywhere;
}
