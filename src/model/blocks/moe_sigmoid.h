// DeepSeek-V3 / Kimi-K2 routing ("noaux_tc"): sigmoid scores, a per-expert correction bias
// that steers selection only, group-limited top-k, weights from the unbiased scores
// (renormalised when norm_topk_prob) times routed_scaling_factor; plus the shared experts, a
// dense SwiGLU every token goes through. The routed experts run through moe_experts (moe.h).
// Routing runs on the host: the CPU backend's tensors are host tensors.
#pragma once

#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"

namespace dayzero::model::blocks {

struct GroupRouteOptions {
  int64_t n_group = 1, topk_group = 1;  // n_expert % n_group == 0, experts per group >= 2
  bool renormalize = true;
  float scaling = 1.0f;
};

// Routing of n tokens from router logits [n, n_expert] and bias [n_expert] (may be null).
// Group score = sum of the two best biased scores of the group; the topk_group best groups
// are kept, then the top k biased scores among their experts. Ties go to the lower index
// (groups and experts). Ids are in descending biased score.
Routing route_sigmoid_group_topk(const float* logits, const float* bias, int64_t n, int64_t n_expert, int64_t k,
                                 const GroupRouteOptions& options);

struct GroupMoeNames {
  MoeNames moe;                // router and routed experts
  std::string bias;            // e_score_correction_bias [n_expert]
  MlpNames shared;             // shared experts (empty gate: none)
};

// Tensor specs of router, bias, routed and shared experts of one layer.
std::vector<TensorSpec> group_moe_specs(const HParams& hp, int layer, const GroupMoeNames& names);

// Returns [n_tokens, n_embd] for x [n_tokens, n_embd]; dump points router_logits, topk_ids.
// Collective over the tp group.
Tensor group_moe_ffn(LayerContext& ctx, int layer, const GroupMoeNames& names, const Tensor& x);

}  // namespace dayzero::model::blocks
