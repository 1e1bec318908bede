// The planner: the memory model against byte counts worked out by hand, caps that just fit
// and just do not, constraint rejections and their reasons, placement of tp groups inside
// nodes, determinism, and Llama-3.1-405B on 1, 2 and 4 nodes of 8 x 80 GiB.
#include <gtest/gtest.h>

#include <chrono>

#include "plan/memory.h"
#include "plan/planner.h"
#include "plan_test_util.h"

namespace dayzero::plan {
namespace {

using testing::hand_plan;
using testing::layers_of;
using testing::specs_of;
using testing::tiny_hp;

PlanRequest tiny_request(int nodes, int gpus, int64_t device_memory) {
  PlanRequest r;
  r.hp = tiny_hp();
  r.specs = specs_of(r.hp);
  r.layer_descs = layers_of(r.hp);
  r.topo.nodes = nodes;
  r.topo.gpus_per_node = gpus;
  r.topo.device_memory_bytes = device_memory;
  r.topo.memory_fraction = 1.0;
  r.bytes_per_weight = 2;
  r.bytes_per_activation = 2;
  r.max_context_tokens = 16;
  r.batch = 1;
  r.headroom_bytes = 1000;
  return r;
}

// By hand, bf16 weights and activations, context 16, batch 1, tp=1:
//   layer weights: norms 2*64, q,o 2*64*64, k,v 2*16*64, gate,up,down 3*192*64 = 47232 el = 94464 B
//   embedding = lm_head 1000*64*2 = 128000 B, final norm 128 B
//   kv per layer: 2 (k,v) * 2 kv heads * 8 * 16 tokens * 2 B = 1024 B
//   activations: 2 B * 16 * (4*64 + 2*8*8 + 2*2*8 + 2*192) = 25600 B; last stage + 4*16*1000 = 64000 B
constexpr int64_t kLayer = 94464, kEmbed = 128000, kNorm = 128, kKv = 1024, kAct = 25600, kLogits = 64000;
constexpr int64_t kHeadroom = 1000;

TEST(Memory, FormulaMatchesHandCount) {
  auto req = tiny_request(1, 2, int64_t{1} << 30);
  const Plan p = hand_plan(1, 1, {0, 2, 4});
  const auto mem = estimate_memory(req.specs, req.hp, p, req.memory_params());
  ASSERT_EQ(mem.size(), 2u);
  EXPECT_EQ(mem[0], (RankMemory{kEmbed + 2 * kLayer, 2 * kKv, kAct, kHeadroom}));
  EXPECT_EQ(mem[1], (RankMemory{2 * kLayer + kNorm + kEmbed, 2 * kKv, kAct + kLogits, kHeadroom}));
  // tp=2 on one stage: kv heads and q heads halve, vocabulary splits 500/500.
  const Plan t = hand_plan(1, 2, {0, 4});
  const auto m2 = estimate_memory(req.specs, req.hp, t, req.memory_params());
  const int64_t split_el = 64 * 64 + 16 * 64 + 3 * 192 * 32;  // half of q,k,v,o,gate,up,down
  const int64_t layer_tp2 = (split_el + 2 * 64) * 2;
  EXPECT_EQ(m2[1].weights, 4 * layer_tp2 + 2 * 500 * 64 * 2 + kNorm);
  EXPECT_EQ(m2[1].kv_cache, 4 * kKv / 2);
  EXPECT_EQ(m2[1].activations, 2 * 16 * (4 * 64 + 2 * 4 * 8 + 2 * 1 * 8 + 2 * 96) + 4 * 16 * 500);
}

TEST(Planner, CapThatJustFitsAndJustDoesNot) {
  // dp=1 pp=2 tp=1 on 2 GPUs: the balanced split is [0, 2) + embedding | [2, 4) + norm + lm_head
  // (first 128000 + 2*95488 = 318976, last 192128 + 2*95488 = 383104; [0, 3) would make 414464).
  const int64_t rank1 = 2 * kLayer + kNorm + kEmbed + 2 * kKv + kAct + kLogits + kHeadroom;
  ASSERT_EQ(rank1, 409704);
  auto req = tiny_request(1, 2, rank1);
  req.dp = 1;
  req.pp = 2;
  req.tp = 1;
  std::vector<Candidate> cands;
  auto fits = choose_plan(req, &cands);
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  EXPECT_EQ(fits->stages[0].layer_end, 2);
  EXPECT_EQ(fits->memory[1].total(), rank1);
  EXPECT_EQ(fits->memory_cap_bytes, rank1);
  ASSERT_EQ(cands.size(), 1u);
  EXPECT_TRUE(cands[0].feasible);
  EXPECT_EQ(cands[0].max_rank_bytes, rank1);
  EXPECT_EQ(cands[0].worst_rank, 1);

  req.topo.device_memory_bytes = rank1 - 1;
  auto short1 = choose_plan(req, &cands);
  ASSERT_FALSE(short1.ok());
  EXPECT_EQ(short1.status().exit_code(), 2);
  EXPECT_EQ(short1.status().message(),
            "no plan fits: best candidate dp=1 pp=2 tp=1 needs 400.1 KiB on rank 1, cap 400.1 KiB (short by 1 B)");
  EXPECT_FALSE(cands[0].feasible);

  // memory_fraction applies: floor(0.5 * 2 * rank1) == rank1 fits.
  req.topo.device_memory_bytes = 2 * rank1;
  req.topo.memory_fraction = 0.5;
  EXPECT_TRUE(choose_plan(req).ok());
}

TEST(Planner, PrefersReplicasWhenTheModelFits) {
  auto req = tiny_request(1, 4, int64_t{1} << 30);
  std::vector<Candidate> cands;
  auto p = choose_plan(req, &cands);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->dp, 4);
  EXPECT_EQ(p->pp, 1);
  EXPECT_EQ(p->tp, 1);
  // (tp, pp) for tp in {1, 2, 4}, pp dividing 4 / tp: 3 + 2 + 1.
  EXPECT_EQ(cands.size(), 6u);
  for (const auto& c : cands) EXPECT_TRUE(c.feasible) << c.dp << " " << c.pp << " " << c.tp << ": " << c.reason;
}

TEST(Planner, ExplicitSizesHonouredOrRejected) {
  auto req = tiny_request(1, 8, int64_t{1} << 30);
  req.tp = 2;
  req.pp = 2;
  auto p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->dp, 2);
  EXPECT_EQ(p->tp, 2);
  EXPECT_EQ(p->pp, 2);

  auto expect_error = [](PlanRequest r, const std::string& message) {
    auto res = choose_plan(r);
    ASSERT_FALSE(res.ok());
    EXPECT_EQ(res.status().message(), message);
    EXPECT_EQ(res.status().exit_code(), 2);
  };
  auto base = tiny_request(1, 8, int64_t{1} << 30);
  auto r = base;
  r.tp = 3;
  expect_error(r, "parallel.tp=3: 8 attention heads are not divisible by 3");
  r = base;
  r.hp.n_ff = 100;
  r.specs = specs_of(r.hp);
  r.layer_descs = layers_of(r.hp);
  r.tp = 8;
  expect_error(r, "parallel.tp=8: intermediate size 100 is not divisible by 8");
  r = base;
  r.topo.gpus_per_node = 4;
  r.topo.nodes = 2;
  r.tp = 8;
  expect_error(r, "parallel.tp=8: a tp group of 8 does not fit on a node of 4 GPUs");
  r = base;
  r.pp = 5;
  expect_error(r, "parallel.pp=5: 5 stages for 4 layers (every stage needs one)");
  r = base;
  r.dp = 3;
  expect_error(r, "parallel.dp=3: does not divide the world of 8 ranks");
  r = base;
  r.dp = 2;
  r.pp = 2;
  r.tp = 4;
  expect_error(r, "parallel: dp=2 x pp=2 x tp=4 = 16 is not the world of 8 ranks");
  r = base;
  r.tp = 4;
  r.ep = 3;
  expect_error(r, "parallel.tp=4: ep=3 does not divide tp=4");
  r = base;
  r.tp = 4;
  r.ep = 2;
  auto ep = choose_plan(r);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->ep, 2);
  EXPECT_EQ(ep->etp, 2);
  for (const auto& c : ep->ranks) EXPECT_EQ(c.ep_rank * 2 + c.etp_rank, c.tp_rank);
}

TEST(Planner, RejectedCandidatesCarryReasons) {
  auto req = tiny_request(2, 4, int64_t{1} << 30);  // world 8 on nodes of 4
  std::vector<Candidate> cands;
  ASSERT_TRUE(choose_plan(req, &cands).ok());
  bool saw_node = false, saw_layers = false;
  for (const auto& c : cands) {
    if (c.tp == 8) {
      EXPECT_FALSE(c.feasible);
      EXPECT_EQ(c.reason, "a tp group of 8 does not fit on a node of 4 GPUs");
      saw_node = true;
    }
    if (c.pp == 8) {
      EXPECT_EQ(c.reason, "8 stages for 4 layers (every stage needs one)");
      saw_layers = true;
    }
  }
  EXPECT_TRUE(saw_node);
  EXPECT_TRUE(saw_layers);
}

TEST(Planner, TpGroupsNeverSpanNodesAndStagesAreNeighbours) {
  auto req = tiny_request(4, 4, int64_t{1} << 30);
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 2, 4}) {
      auto r = req;
      r.tp = tp;
      r.pp = pp;
      auto p = choose_plan(r);
      ASSERT_TRUE(p.ok()) << p.status().message();
      for (const auto& c : p->ranks) {
        EXPECT_EQ(c.rank, rank_of(*p, c.dp_rank, c.pp_rank, c.tp_rank));
        EXPECT_EQ(c.node, c.rank / 4);
        EXPECT_EQ(c.local_rank, c.rank % 4);
        const RankCoord& head = p->coord(c.rank - c.tp_rank);  // tp rank 0 of the group
        EXPECT_EQ(c.node, head.node) << "tp=" << tp << " pp=" << pp << " rank " << c.rank;
        if (c.pp_rank + 1 < pp) {
          const int next = rank_of(*p, c.dp_rank, c.pp_rank + 1, c.tp_rank);
          EXPECT_LE(p->coord(next).node - c.node, 1);
        }
      }
      // Stages cover every layer once, each with at least one.
      int expect_begin = 0;
      for (const auto& s : p->stages) {
        EXPECT_EQ(s.layer_begin, expect_begin);
        EXPECT_GT(s.layer_end, s.layer_begin);
        expect_begin = s.layer_end;
      }
      EXPECT_EQ(expect_begin, 4);
    }
  }
}

TEST(Planner, Deterministic) {
  auto req = tiny_request(2, 4, 300000);  // tight enough that stages are needed
  req.topo.memory_fraction = 1.0;
  std::vector<Candidate> a, b;
  auto p1 = choose_plan(req, &a);
  auto p2 = choose_plan(req, &b);
  ASSERT_EQ(p1.ok(), p2.ok());
  if (p1.ok()) {
    EXPECT_EQ(to_json(*p1).dump(), to_json(*p2).dump());
  }
  else EXPECT_EQ(p1.status().message(), p2.status().message());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].reason, b[i].reason);
    EXPECT_EQ(a[i].max_rank_bytes, b[i].max_rank_bytes);
  }
}

// Llama-3.1-405B through the real adapter.
struct Llama405B {
  model::HParams hp;
  std::vector<model::TensorSpec> specs;
  std::vector<model::LayerDesc> layers;
  EdgeNames names;
  Llama405B() {
    const auto cfg = testing::read_fixture_config("Meta-Llama-3.1-405B");
    auto a = model::find_adapter(cfg);
    EXPECT_TRUE(a.ok());
    auto h = (*a)->parse_hparams(cfg);
    EXPECT_TRUE(h.ok());
    hp = *h;
    specs = (*a)->tensor_specs(hp);
    layers = model::describe_layers(**a, hp, specs);
    names = edge_names(**a, hp);
  }
  PlanRequest request(int nodes) const {
    PlanRequest r;
    r.hp = hp;
    r.specs = specs;
    r.layer_descs = layers;
    r.names = names;
    r.topo.nodes = nodes;
    r.topo.gpus_per_node = 8;
    r.topo.device_memory_bytes = int64_t{80} << 30;
    r.topo.memory_fraction = 0.9;
    r.bytes_per_weight = 2;
    r.max_context_tokens = 4096;
    return r;
  }
};

TEST(Llama405B, InfeasibleOnOneNode) {
  const Llama405B m;
  std::vector<Candidate> cands;
  auto p = choose_plan(m.request(1), &cands);
  ASSERT_FALSE(p.ok());
  const std::string& msg = p.status().message();
  EXPECT_EQ(msg.rfind("no plan fits: best candidate dp=1 ", 0), 0u) << msg;
  EXPECT_NE(msg.find("cap 72.0 GiB (short by "), std::string::npos) << msg;
  // 811.7 GB of weights over 8 ranks is 94.5 GiB each before KV cache and activations.
  int64_t least = 0;
  for (const auto& c : cands)
    if (c.worst_rank >= 0 && (least == 0 || c.max_rank_bytes < least)) least = c.max_rank_bytes;
  EXPECT_GT(least, int64_t{405853388800} * 2 / 8);
}

TEST(Llama405B, FeasibleOnTwoAndFourNodesWithExactWeightBytes) {
  const Llama405B m;
  const int64_t total = int64_t{405853388800} * 2;
  for (int nodes : {2, 4}) {
    auto p = choose_plan(m.request(nodes));
    ASSERT_TRUE(p.ok()) << nodes << " nodes: " << p.status().message();
    EXPECT_EQ(p->tp, 8) << nodes;
    EXPECT_EQ(p->world_size, nodes * 8);
    for (const auto& r : p->memory) EXPECT_LE(r.total(), p->memory_cap_bytes);
    // One dp replica: slices summed over its ranks, a tensor held whole by every rank of a tp
    // group counted once per group, give the checkpoint's bytes exactly; and each rank's
    // estimate is the sum of its own slices.
    int64_t sum = 0;
    for (int r = 0; r < p->pp * p->tp; ++r) {
      int64_t mine = 0;
      for (const auto& s : m.specs) {
        const Slice sl = slice_for(s, m.hp, *p, r, m.names);
        const int64_t b = slice_bytes(s, sl, 2);
        mine += b;
        if (sl.dim >= 0 || p->coord(r).tp_rank == 0) sum += b;
      }
      EXPECT_EQ(mine, p->memory[r].weights) << "rank " << r;
    }
    EXPECT_EQ(sum, total) << nodes << " nodes";
  }
}

TEST(Llama405B, FixedSizesOnTwoNodes) {
  const Llama405B m;
  auto req = m.request(2);
  req.tp = 3;
  auto p = choose_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "parallel.tp=3: 128 attention heads are not divisible by 3");
  req = m.request(2);
  req.pp = 16;
  req.tp = 1;
  p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->pp, 16);
  int layers = 0;
  for (const auto& s : p->stages) layers += s.layer_end - s.layer_begin;
  EXPECT_EQ(layers, 126);
}

TEST(Llama405B, FastOnAThousandRanks) {
  const Llama405B m;
  const auto t0 = std::chrono::steady_clock::now();
  auto p = choose_plan(m.request(128));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->world_size, 1024);
  // A generous bound for slow CI machines; bench/plan_bench.cpp measures it.
  EXPECT_LT(s, 1.0);
}

}  // namespace
}  // namespace dayzero::plan

namespace dayzero::plan {
namespace {

// A replay of layers [1, 3): one stage of those layers, no embedding, final norm or lm_head,
// no logits; the memory is two layers' weights and KV cache (testing::tiny_hp by hand, above).
TEST(Planner, ReplayCountsOnlyItsLayers) {
  auto req = tiny_request(1, 2, int64_t{1} << 30);
  req.world_size = 1;
  req.layers = std::pair{1, 3};
  auto p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->stages.size(), 1u);
  EXPECT_EQ(p->stages[0].layer_begin, 1);
  EXPECT_EQ(p->stages[0].layer_end, 3);
  EXPECT_FALSE(p->stages[0].has_embedding);
  EXPECT_FALSE(p->stages[0].has_lm_head);
  EXPECT_EQ(p->memory[0], (RankMemory{2 * kLayer, 2 * kKv, kAct, kHeadroom}));
  // tp2 over both ranks: the same layers, split.
  req.world_size = 2;
  req.tp = 2;
  p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory[0].weights, 2 * ((64 * 64 + 16 * 64 + 3 * 192 * 32 + 2 * 64) * 2));
}

TEST(Planner, ReplayRangeAndStagesChecked) {
  const auto error = [](std::pair<int, int> layers, std::optional<int> pp) {
    auto req = tiny_request(1, 2, int64_t{1} << 30);
    req.layers = layers;
    req.pp = pp;
    auto p = choose_plan(req);
    return p.ok() ? std::string("ok") : p.status().message();
  };
  EXPECT_EQ(error({2, 2}, {}), "layers 2:2: not a non-empty range of the model's 4 layers");
  EXPECT_EQ(error({3, 5}, {}), "layers 3:5: not a non-empty range of the model's 4 layers");
  EXPECT_EQ(error({-1, 1}, {}), "layers -1:1: not a non-empty range of the model's 4 layers");
  EXPECT_EQ(error({0, 4}, 2),
            "parallel.pp=2: a replay runs its layers on one pipeline stage; set parallel.pp to 1 or leave it out");
  EXPECT_EQ(error({0, 4}, {}), "ok") << "the planner itself chooses pp = 1 for a replay";
}

// The point of a replay: one block of a model that needs two nodes of eight 80 GiB GPUs fits
// one device, counted as that layer's weights alone.
TEST(Llama405B, OneLayerReplayFitsOneDevice) {
  const Llama405B m;
  PlanRequest req = m.request(1);
  req.world_size = 1;
  req.layers = std::pair{12, 13};
  auto p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  int64_t layer = 0;
  for (const auto& s : m.specs)
    if (s.layer == 12) layer += shape_numel(s.shape) * 2;
  EXPECT_EQ(p->memory[0].weights, layer);
  EXPECT_LT(p->memory[0].total(), p->memory_cap_bytes);
}

}  // namespace
}  // namespace dayzero::plan
