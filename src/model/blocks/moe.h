// Mixture-of-experts feed-forward with a softmax router (Mixtral, Qwen3-MoE): router logits
// -> softmax (f32) -> top-k -> optional renormalisation -> the SwiGLU experts the tokens
// chose, weighted and summed. Expert parallel: each rank holds the experts of its ep range
// (split etp ways) and adds only their contributions; one all-reduce over the tp group (= ep x
// etp ranks) sums the partial outputs, the simple first form of dispatch/combine (every
// rank routes all tokens; no all-to-all). Under wide expert parallelism (ctx.expert_group)
// the tokens travel to their experts' owners and back with all-to-alls instead
// (moe_dispatched, moe_dispatch.cpp). Dump points: router_logits, topk_ids.
// The selection is a Backend op (route_topk: on the device with CUDA); the per-expert token
// lists and the weighted sum of the experts' outputs are built on the host.
#pragma once

#include <string>

#include "backend/backend.h"
#include "model/adapter.h"

namespace dayzero::model::blocks {

struct MoeNames {
  std::string router;                           // [n_expert, n_embd]
  std::string expert_gate, expert_up, expert_down;  // templates with {L} and {E}: [ff, d], [ff, d], [d, ff]
};

// Routing decision for n tokens on the host: ids and weights [n, k], ties to the lower expert id.
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
// Selects the experts with the backend's route_topk (on its device) from router logits
// [n_tokens, n_expert] (bias [n_expert] or null: RouterOptions), then copies ids and weights
// to the host, where moe_experts gathers each expert's tokens.
Routing route_experts(backend::Backend& be, const Tensor& logits, const Tensor* bias, const backend::RouterOptions& o);

// Tensor specs of one MoE layer's router and experts.
std::vector<TensorSpec> moe_specs(const HParams& hp, int layer, const MoeNames& names);

// Returns [n_tokens, n_embd] for x [n_tokens, n_embd].
Tensor moe_ffn(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x);

// The routed part given a routing decision r (ids and weights [n_tokens, n_expert_used]):
// counts and dumps topk_ids, runs this rank's experts and all-reduces over the tp group, or,
// with ctx.expert_group, dispatches this rank's rows to their experts' owners and combines
// (moe_dispatched). Returns [n_tokens, n_embd]. Collective over the tp (or expert) group.
Tensor moe_experts(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x, const Routing& r);

// Wide expert parallelism (ctx.expert_group): this rank's rows (ExpertGroup) go with their
// expert ids to the ranks owning the chosen experts (all-to-all "dispatch": rows ordered by
// destination, then token, then slot; the counts exchanged first with an all-gather), each rank
// runs its experts on what it received, the results return in the same order ("combine"), the
// router weights are applied in the original token order (slots by ascending expert id, as
// moe_experts sums them), and the rows of all ranks are all-gathered.
Tensor moe_dispatched(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x, const Routing& r);

// One expert's SwiGLU on rows xe [m, n_embd] (host) -> [m, n_embd] (host); gate_w: the expert's
// gate (this rank's etp share).
Tensor run_expert(LayerContext& ctx, int layer, int expert, const MoeNames& names, const Tensor& gate_w,
                  const Tensor& xe_host);

}  // namespace dayzero::model::blocks
