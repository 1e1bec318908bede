// Mixture-of-experts feed-forward with a softmax router (Mixtral, Qwen3-MoE): router logits
// -> softmax (f32) -> top-k -> optional renormalisation -> the SwiGLU experts the tokens
// chose, weighted and summed. Expert parallel: each rank holds the experts of its ep range
// (split etp ways) and adds only their contributions; one all-reduce over the tp group (= ep x
// etp ranks) sums the partial outputs, the simple first form of dispatch/combine (every
// rank routes all tokens; no all-to-all). Dump points: router_logits, topk_ids.
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
// counts and dumps topk_ids, runs this rank's experts and all-reduces over the tp group.
// Returns [n_tokens, n_embd]. Collective over the tp group.
Tensor moe_experts(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x, const Routing& r);

}  // namespace dayzero::model::blocks
