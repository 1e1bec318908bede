// The parallel plan: a value every rank computes identically from the model, the topology and
// the run config. world = dp x pp x tp; inside a stage the tp ranks also split as ep x etp
// (ep * etp = tp) for MoE layers. Wide expert parallelism (ep_dp > 1): an expert group spans
// ep_dp consecutive dp replicas of the same stage (ep = ep_dp x tp, etp = 1); those replicas run
// the same prompts (data-parallel attention, each computing attention and dense layers for the
// whole batch), and each holds n_expert / ep routed experts (docs/planner.md "Wide expert
// parallelism"). Rank order (the Cartesian decomposition of the world, tp
// fastest): rank = ((dp_rank * pp) + pp_rank) * tp + tp_rank, so a tp group is consecutive
// ranks (one node) and consecutive stages are neighbouring ranks/nodes.
// Serialisable to JSON (plan.json in the run folder, the `plan` root attribute of dumps).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::plan {

struct RankCoord {
  int rank = 0;
  int dp_rank = 0, pp_rank = 0, tp_rank = 0, ep_rank = 0, etp_rank = 0;  // this rank's index along each axis
  int node = 0;                                 // index into Plan::nodes
  int local_rank = 0;                           // rank within its node (the GPU index)
};

struct Stage {
  int pp = 0;
  int layer_begin = 0, layer_end = 0;  // decoder layers [begin, end)
  bool has_embedding = false;          // first stage
  bool has_lm_head = false;            // last stage (final norm + lm_head)
};

// Estimated bytes one rank holds on its device.
struct RankMemory {
  int64_t weights = 0;
  int64_t kv_cache = 0;
  int64_t activations = 0;   // activations and workspace
  int64_t headroom = 0;      // fixed reserve: runtime, library workspaces, fragmentation
  // Fixed per-sequence state of linear-attention layers (conv window + recurrent state), which
  // hold it instead of a KV cache; 0 for models without such layers. Last, so that the
  // positional initialisation {weights, kv_cache, activations, headroom} keeps its meaning.
  int64_t state = 0;
  int64_t total() const { return weights + kv_cache + activations + headroom + state; }
  bool operator==(const RankMemory&) const = default;
};

// A figure of the plan that rests on an estimate or on a feature dayzero cannot run yet
// (plans of models without an adapter): which figure ("weights", "kv_cache", "state",
// "activations") and why, shown next to that figure in the report.
struct Caveat {
  std::string figure;
  std::string text;
  bool operator==(const Caveat&) const = default;
};

// Where a multimodal model's vision tower and projector (components kVision, kProjector) run
// and what they hold; present false for a model without them. They run on the first stage,
// before its decoder layers, each tp rank of that stage holding them whole (replicated: every
// spec's rule is kReplicated; no tp-split tower is built). The bytes are those of the memory
// model (held_bytes), so they are part of RankMemory::weights of the first stage's ranks.
struct VisionPlacement {
  bool present = false;
  int stage = 0;               // the pipeline stage that runs them
  std::string placement;       // "replicated"
  int64_t tower_bytes = 0;     // per rank of that stage
  int64_t projector_bytes = 0;
  // The alternative weighed: tower and projector split over tp like the text layers would hold
  // (tower_bytes + projector_bytes) / tp per rank, and add two all-reduces per encoder layer
  // (after attention and after the MLP) of [patches, width] at the compute dtype: this many
  // bytes per image patch. Both 0 when tp is 1.
  int64_t split_bytes = 0;
  int64_t split_all_reduce_bytes_per_patch = 0;
  std::string reason;  // one sentence: the choice and its figures
  bool operator==(const VisionPlacement&) const = default;
};

// Where a wide expert-parallel plan (ep_dp > 1) puts the routed experts: ep blocks of
// n_expert / ep consecutive experts of every MoE layer, block e on the ranks whose ep_rank is e
// (one per stage in each group of ep_dp replicas). present false for other plans.
struct ExpertBlock {
  int ep_rank = 0;
  int expert_begin = 0, expert_end = 0;  // [begin, end) in every MoE layer
  int64_t bytes = 0;                      // the block's routed-expert bytes, all layers (all stages)
  std::vector<int> ranks;                 // world ranks of the first expert group holding it
  bool operator==(const ExpertBlock&) const = default;
};
struct ExpertPlacement {
  bool present = false;
  int n_expert = 0, top_k = 0;
  // Bytes one token sends and receives over the expert group per MoE layer (dispatch to its
  // top_k experts and combine back; the share that stays on the rank not counted), and the
  // share of them that crosses nodes.
  int64_t all_to_all_bytes_per_token = 0;
  double inter_node_share = 0;
  std::vector<ExpertBlock> blocks;  // [ep]
  std::string reason;               // one sentence: why this ep, with its figures
  bool operator==(const ExpertPlacement&) const = default;
};

struct Plan {
  int world_size = 1;
  int dp = 1, pp = 1, tp = 1, ep = 1, etp = 1;
  // The dp replicas one expert group spans (1: experts inside the tp group). ep * etp ==
  // ep_dp * tp; ep_dp > 1 needs etp == 1 and dp % ep_dp == 0. A rank's ep_rank is then
  // (dp_rank % ep_dp) * tp + tp_rank; replicas dp_rank / ep_dp share their prompts.
  int ep_dp = 1;
  std::vector<Stage> stages;              // [pp]
  std::vector<RankCoord> ranks;           // [world_size]
  std::vector<std::string> nodes;         // node names, [n_nodes]
  std::vector<RankMemory> memory;         // [world_size]
  int64_t memory_cap_bytes = 0;           // memory_fraction x device memory
  double cost_per_token_s = 0;            // the cost model's estimate
  std::vector<Caveat> caveats;            // empty for a family with an adapter
  VisionPlacement vision;                 // multimodal models only (present)
  ExpertPlacement experts;                // wide expert parallelism only (present)

  const RankCoord& coord(int rank) const { return ranks.at(rank); }
  bool wide_ep() const { return ep_dp > 1; }
  // The groups of replicas that run distinct prompts (dp / ep_dp) and this rank's one.
  int prompt_groups() const { return dp / ep_dp; }
  const Stage& stage_of(int rank) const { return stages.at(ranks.at(rank).pp_rank); }
};

nlohmann::json to_json(const Plan& p);
// The inverse of to_json. InvalidArgument naming the key when a field is missing or mistyped,
// or when the sizes, stages and ranks are inconsistent (dp x pp x tp != world, ...).
Result<Plan> plan_from_json(const nlohmann::json& j);
// The same content as to_json, as a YAML document.
std::string to_yaml(const Plan& p);
// Rank order of the header comment: ((dp_rank * pp) + pp_rank) * tp + tp_rank, and inside tp
// tp_rank = ep_rank * etp + etp_rank.
int rank_of(const Plan& p, int dp_rank, int pp_rank, int tp_rank);

// The trivial plan: every rank a data-parallel replica holding the whole model. rank_nodes is
// the node name of every rank ([world_size]) or empty (all on one node "node0"); nodes are
// numbered in order of first appearance and local_rank counts earlier ranks on the same node.
// memory is [world_size] zeros (no estimate).
Plan data_parallel_plan(int world_size, int n_layer, const std::vector<std::string>& rank_nodes);

}  // namespace dayzero::plan
