// The planner: chooses dp x pp x tp (and ep x etp inside tp) for a model on a topology, the
// layer range of every stage and the placement of ranks on nodes, then estimates every rank's
// memory (memory.h) and a per-token cost. A pure function of its request: every rank that
// calls it with the same request gets the same plan, with no communication. It does not
// discover topology, read weights or validate the run config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/hparams.h"
#include "model/layer_desc.h"
#include "model/tensor_spec.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "plan/slicing.h"
#include "topology/topology.h"

namespace dayzero::plan {

struct PlanRequest {
  model::HParams hp;
  std::vector<model::TensorSpec> specs;
  EdgeNames names;  // the adapter's (edge_names); the defaults fit the Llama-like families
  topology::Topology topo;
  int world_size = 0;  // 0: topo.nodes x topo.gpus_per_node; ranks fill nodes in order
  std::optional<int> dp, pp, tp, ep, etp;  // sizes the user fixed
  int64_t bytes_per_weight = 2;            // weights on the device, converted (bfloat16 2, float32 4)
  // Weights kept as stored: each spec's stored element size, parallel to specs (FP8 1 byte plus
  // its f32 block scales, BF16 2; memory.h held_bytes). Empty: every weight at bytes_per_weight.
  std::vector<int64_t> stored_bytes;
  int64_t bytes_per_activation = 2;        // compute dtype of KV cache and activations
  int64_t max_context_tokens = 4096;
  int batch = 1;                           // sequences resident (and in flight) at once
  int64_t headroom_bytes = int64_t{1} << 30;
  // A replay (`dayzero run --replay-layers`): only decoder layers [first, second) on one stage
  // that holds no embedding, final norm or lm_head (no logits); pp is 1. Absent: the whole model.
  std::optional<std::pair<int, int>> layers;
  // What each decoder layer is ([n_layer], model/layer_desc.h): the adapter's
  // (model::describe_layers), or the generic analysis's for a family without one. The planner
  // reads the layers' caches, stage starts and state heads from here, never from hp's family part.
  std::vector<model::LayerDesc> layer_descs;
  std::vector<Caveat> caveats;  // copied into the plan: figures that rest on estimates

  MemoryParams memory_params() const;
};

// One (dp, pp, tp) the planner looked at, with the ep x etp split of tp it chose for it (ep=1,
// etp=tp for dense models; for MoE models without a fixed ep or etp, the best of the splits
// that fit the experts: lowest cost, then lowest max_rank_bytes, then the largest ep). feasible: it passed every constraint and fits in
// memory. reason: why not (empty when feasible). max_rank_bytes / worst_rank: the largest
// per-rank estimate and its rank (0 / -1 when a layout constraint rejected it before memory
// was counted). cost: estimated seconds per generated token over the whole world (the cost
// model of docs/planner.md); +inf when rejected by a constraint.
struct Candidate {
  int dp = 1, pp = 1, tp = 1;
  bool feasible = false;
  std::string reason;
  double cost = 0;
  int64_t max_rank_bytes = 0;
  int worst_rank = -1;
  int ep = 1, etp = 1;
  // Wide expert parallelism (plan.h ep_dp > 1): the replicas an expert group spans, and the
  // all-to-all traffic one token causes per MoE layer on its way to its experts and back
  // (2 x top_k x n_embd x bytes_per_activation x (ep - 1) / ep) with the share of it that
  // crosses nodes; the routed-expert bytes each rank holds (n_expert / ep experts a layer).
  int ep_dp = 1;
  int64_t all_to_all_bytes_per_token = 0;
  double inter_node_share = 0;
  int64_t expert_bytes_per_rank = 0;
};

// The plan of the lowest cost; ties go to fewer stages, then smaller tp. ep x etp: the fixed
// sizes, else (MoE) every split with n_expert % ep == 0 and the split expert dims divisible by
// etp is evaluated for each (dp, pp, tp) and the best kept (see Candidate). `considered` (may be
// null) receives every candidate in enumeration order (tp ascending, then pp ascending).
// Errors (InvalidArgument, exit 2):
//   a fixed size that cannot work: "parallel.tp=3: 64 attention heads are not divisible by 3";
//   nothing fits: "no plan fits: best candidate dp=1 pp=16 tp=8 needs 83.1 GiB on rank 7,
//   cap 72.0 GiB (short by 11.1 GiB)" (the best is the one short by the least);
//   a bad topology or request (validate(topology::Topology), world larger than the topology);
//   layers: an empty or out-of-range range, or a fixed pp other than 1.
Result<Plan> choose_plan(const PlanRequest& req, std::vector<Candidate>* considered = nullptr);

// The layout constraints of one (pp, tp) with their reason, before memory: tp divides the GPUs
// of a node (a tp group never spans nodes), the model splits over tp (check_tp), ep/etp fit tp
// (none fixed: some ep x etp split fits the experts), pp <= n_layer. Ok, or InvalidArgument
// with a reason sentence that has no "parallel." prefix.
Status check_layout(const PlanRequest& req, int pp, int tp);

// Contiguous layer ranges for pp stages from per-layer loads w (fixed costs of the first and
// last stage added), keeping runs of layers that stay together; [pp + 1] bounds. The planner's
// balancing, shared with the wide expert-parallel candidates (wide_ep.h).
std::vector<int> balance_layers(const std::vector<model::LayerDesc>& layers, const std::vector<int64_t>& w, int pp,
                                int64_t fixed_first, int64_t fixed_last);

// The layout both planners write: p.stages from bounds (the embedding and lm_head on the first and
// last stage when `edges`), p.nodes, and every rank's rank, tp, pp and dp coordinates (tp fastest,
// then pp, then dp) with its node and local rank, topo.gpus_per_node to a node. REQUIRES:
// p.world_size, p.pp, p.tp set. Expert coordinates (ep_rank, etp_rank) are the caller's.
void lay_out_ranks(Plan& p, const std::vector<int>& bounds, bool edges, const topology::Topology& topo);

}  // namespace dayzero::plan
