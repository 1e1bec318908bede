// Shared by the plan tests: a small synthetic Llama model and hand-built plans, so that the
// expected slices and byte counts can be worked out by hand next to each case.
#pragma once

#include <gtest/gtest.h>

#include <fstream>

#include "model/registry.h"
#include "plan/plan.h"
#include "plan/planner.h"

namespace dayzero::plan::testing {

// 4 layers, hidden 64, 8 heads of 8 (2 kv heads), ffn 192, vocab 1000.
inline model::HParams tiny_hp(bool tied = false) {
  model::HParams hp;
  hp.family = hp.model_type = "llama";
  hp.n_vocab = 1000;
  hp.n_embd = 64;
  hp.n_layer = 4;
  hp.n_head = 8;
  hp.n_head_kv = 2;
  hp.head_dim = 8;
  hp.n_ff = 192;
  hp.tie_embeddings = tied;
  return hp;
}

inline std::vector<model::TensorSpec> specs_of(const model::HParams& hp) {
  auto a = model::find_adapter_by_family(hp.family);
  EXPECT_TRUE(a.ok());
  return (*a)->tensor_specs(hp);
}

// The family's layer descriptors with their weights (model::describe_layers).
inline std::vector<model::LayerDesc> layers_of(const model::HParams& hp) {
  auto a = model::find_adapter_by_family(hp.family);
  EXPECT_TRUE(a.ok());
  return model::describe_layers(**a, hp, (*a)->tensor_specs(hp));
}

inline const model::TensorSpec& spec_named(const std::vector<model::TensorSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  ADD_FAILURE() << "no spec " << name;
  static model::TensorSpec none;
  return none;
}

// A plan in the rank order of plan.h with the given stage bounds ([pp + 1]), one node per `per_node` ranks.
inline Plan hand_plan(int dp, int tp, const std::vector<int>& bounds, int per_node = 8) {
  Plan p;
  p.dp = dp;
  p.tp = p.etp = tp;
  p.pp = static_cast<int>(bounds.size()) - 1;
  p.world_size = dp * p.pp * tp;
  for (int s = 0; s < p.pp; ++s) p.stages.push_back({s, bounds[s], bounds[s + 1], s == 0, s == p.pp - 1});
  for (int r = 0; r < p.world_size; ++r) {
    RankCoord c;
    c.rank = r;
    c.tp_rank = c.etp_rank = r % tp;
    c.pp_rank = r / tp % p.pp;
    c.dp_rank = r / (tp * p.pp);
    c.node = r / per_node;
    c.local_rank = r % per_node;
    p.ranks.push_back(c);
  }
  for (int n = 0; n <= (p.world_size - 1) / per_node; ++n) p.nodes.push_back("node" + std::to_string(n));
  return p;
}

inline nlohmann::json read_fixture_config(const std::string& name) {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

// A published config through its real adapter: the planner's inputs, and a request for nodes x
// gpus of mem bytes with the weights as stored per config.json (bf16, FP8 where quantized).
struct ConfigModel {
  model::HParams hp;
  std::vector<model::TensorSpec> specs;
  std::vector<model::LayerDesc> layers;
  EdgeNames names;
  explicit ConfigModel(const nlohmann::json& cfg) {
    auto a = model::find_adapter(cfg);
    EXPECT_TRUE(a.ok()) << a.status().message();
    auto h = (*a)->parse_hparams(cfg);
    EXPECT_TRUE(h.ok()) << h.status().message();
    hp = *h;
    specs = (*a)->tensor_specs(hp);
    layers = model::describe_layers(**a, hp, specs);
    names = edge_names(**a, hp);
  }
  PlanRequest request(int nodes, int gpus = 8, int64_t mem = int64_t{80} << 30) const {
    PlanRequest r;
    r.hp = hp;
    r.specs = specs;
    r.layer_descs = layers;
    r.names = names;
    r.topo.nodes = nodes;
    r.topo.gpus_per_node = gpus;
    r.topo.device_memory_bytes = mem;
    r.topo.memory_fraction = 0.9;
    r.bytes_per_weight = 2;
    r.stored_bytes = stored_bytes_from_config(specs, 2);
    r.max_context_tokens = 4096;
    return r;
  }
};

}  // namespace dayzero::plan::testing
