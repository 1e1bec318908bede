// Wide expert parallelism in the planner: Kimi-K2's published config on 64 nodes x 8 GPUs
// (512 ranks) asked for ep = 64 gives a wide plan (its time: bench/plan_bench) whose per-rank bytes add up to
// the checkpoint; the candidates of an unfixed request list ep = 16..384 (the ones whose expert
// group does not tile 512 ranks rejected with the reason); the table-built memory of a wide
// plan equals slice_for's, rank by rank; the placement survives plan.json.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "plan/memory.h"
#include "plan/planner.h"
#include "plan/wide_ep.h"
#include "plan_test_util.h"

namespace dayzero::plan {
namespace {

using Model = testing::ConfigModel;

bool routed(const model::TensorSpec& s) { return s.rule == model::ShardRule::kExpertOwned && s.expert >= 0; }

TEST(WideEpPlanner, KimiK2On512GpusWithEp64) {
  const Model m(testing::read_fixture_config("Kimi-K2-Instruct"));
  ASSERT_EQ(m.hp.n_expert, 384);
  PlanRequest req = m.request(64, 8, int64_t{141} << 30);
  req.ep = 64;
  auto p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  std::cout << "Kimi-K2 ep=64 on 64 x 8: dp=" << p->dp << " pp=" << p->pp << " tp=" << p->tp << " ep_dp=" << p->ep_dp
            << ", " << p->memory[0].weights << " weight bytes on rank 0, max total " << p->memory[0].total() << "\n";
  EXPECT_EQ(p->world_size, 512);
  EXPECT_EQ(p->ep, 64);
  EXPECT_EQ(p->tp, 1);
  EXPECT_EQ(p->etp, 1);
  EXPECT_EQ(p->ep_dp, 64);
  for (const RankMemory& r : p->memory) EXPECT_LE(r.total(), p->memory_cap_bytes);
  ASSERT_TRUE(p->experts.present);
  ASSERT_EQ(p->experts.blocks.size(), 64u);
  EXPECT_EQ(p->experts.blocks[5].expert_begin, 30);
  EXPECT_EQ(p->experts.blocks[5].expert_end, 36);

  // The bytes add up to the checkpoint: the routed experts once over the 64 blocks, every other
  // tensor once over one attention replica (tp = 1: one rank per stage).
  const MemoryParams mp = req.memory_params();
  int64_t total = 0, experts = 0;
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const int64_t b = held_bytes(m.specs[i], i, Slice{true, -1, 0, 0}, mp);
    total += b;
    if (routed(m.specs[i])) experts += b;
  }
  int64_t blocks = 0;
  for (const ExpertBlock& b : p->experts.blocks) blocks += b.bytes;
  EXPECT_EQ(blocks, experts);
  int64_t group = 0;  // the weights of expert group 0: ranks 0..63 (one stage)
  for (int r = 0; r < 64; ++r) group += p->memory[r].weights;
  EXPECT_EQ(group - 63 * (p->memory[0].weights - p->experts.blocks[0].bytes), total);
  std::cout << "Kimi-K2 as stored: " << total << " bytes, routed experts " << experts << "\n";
}

TEST(WideEpPlanner, KimiK2CandidatesListEp16To384) {
  const Model m(testing::read_fixture_config("Kimi-K2-Instruct"));
  const PlanRequest req = m.request(64, 8, int64_t{141} << 30);
  std::vector<Candidate> cands;
  const auto t0 = std::chrono::steady_clock::now();
  auto p = choose_plan(req, &cands);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->wide_ep());  // chosen only when asked for
  std::map<int, int> fits, rejected;
  for (const Candidate& c : cands) {
    if (c.ep_dp <= 1) continue;
    (c.feasible ? fits : rejected)[c.ep]++;
    if (c.ep == 384) {
      EXPECT_EQ(c.reason, "an expert group of ep=384 x pp=1 stages does not tile the world of 512 ranks");
    }
  }
  std::cout << "Kimi-K2 candidates: " << cands.size() << " in " << s << " s\n";
  for (int ep : {16, 32, 64, 128}) EXPECT_GT(fits[ep], 0) << ep;
  for (int ep : {24, 48, 96, 192, 384}) EXPECT_GT(rejected[ep], 0) << ep;
  EXPECT_EQ(fits.count(8), 0u);  // inside a node: the ep x etp = tp candidates cover it
}

TEST(WideEpPlanner, TableMemoryEqualsSliceForAndJsonRoundTrips) {
  const Model m(testing::read_fixture_config("Qwen3-30B-A3B"));
  ASSERT_EQ(m.hp.n_expert, 128);
  for (const auto& [tp, pp] : {std::pair{1, 1}, {2, 2}, {1, 2}}) {
    PlanRequest req = m.request(8, 4, int64_t{80} << 30);
    req.ep = 16;
    req.tp = tp;
    req.pp = pp;
    auto p = choose_plan(req);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->ep_dp, 16 / tp);
    const std::vector<RankMemory> slow = estimate_memory(req.specs, req.hp, *p, req.memory_params(), req.names);
    ASSERT_EQ(slow.size(), p->memory.size());
    for (size_t r = 0; r < slow.size(); ++r) EXPECT_EQ(slow[r], p->memory[r]) << "rank " << r << " tp " << tp;
    auto back = plan_from_json(to_json(*p));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->ep_dp, p->ep_dp);
    EXPECT_EQ(back->experts, p->experts);
  }
}

TEST(WideEpPlanner, BadRequestsNameTheReason) {
  const Model m(testing::read_fixture_config("Qwen3-30B-A3B"));
  PlanRequest req = m.request(4, 4, int64_t{80} << 30);
  req.ep = 12;  // 128 experts
  auto p = choose_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "parallel.ep=12: 128 experts are not divisible by 12");
  req.ep = 8;
  req.tp = 3;
  p = choose_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "parallel.ep=8: wide expert parallelism needs ep a multiple of tp=3");
}

}  // namespace
}  // namespace dayzero::plan
