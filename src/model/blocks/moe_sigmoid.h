// DeepSeek-V3 / Kimi-K2 routing ("noaux_tc"): sigmoid scores, a per-expert correction bias
// that steers selection only, group-limited top-k, weights from the unbiased scores
// (renormalised when norm_topk_prob) times routed_scaling_factor; plus the shared experts, a
// dense SwiGLU every token goes through. The routed experts run through moe_experts (moe.h).
// The selection is route_topk's kSigmoidGrouped (backend.h; kernels/cpu/router.h states the
// arithmetic and the tie rule).
#pragma once

#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"

namespace dayzero::model::blocks {

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
