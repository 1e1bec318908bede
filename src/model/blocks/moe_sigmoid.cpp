// Sigmoid, bias-steered, group-limited routing and the shared experts.
#include "model/blocks/moe_sigmoid.h"

#include "backend/backend.h"

namespace dayzero::model::blocks {

std::vector<TensorSpec> group_moe_specs(const HParams& hp, int layer, const GroupMoeNames& n) {
  std::vector<TensorSpec> s = moe_specs(hp, layer, n.moe);
  s.push_back({layer_tensor_name(n.bias, layer), {hp.n_expert}, ShardRule::kReplicated, layer});
  s.back().component = Component::kRouter;
  const size_t shared_from = s.size();
  if (!n.shared.gate.empty()) {
    const int64_t ff = hp.deepseek().routing.n_shared_experts * hp.n_ff_expert, d = hp.n_embd;
    s.push_back({n.shared.gate, {ff, d}, ShardRule::kSplitDim0, layer});
    s.push_back({n.shared.up, {ff, d}, ShardRule::kSplitDim0, layer});
    s.push_back({n.shared.down, {d, ff}, ShardRule::kSplitDim1, layer});
  }
  set_component(s, shared_from, Component::kSharedExpert);
  return s;
}

Tensor group_moe_ffn(LayerContext& ctx, int layer, const GroupMoeNames& names, const Tensor& x) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n = x.dim(0), ne = hp.n_expert;
  const std::string prefix = "layers." + std::to_string(layer) + ".";

  Tensor logits = be.empty(DType::kF32, {n, ne});
  be.matmul(x, ctx.w.get(layer_tensor_name(names.moe.router, layer)), logits);
  emit(ctx.sink, prefix + "router_logits", logits);
  backend::RouterOptions o;
  o.kind = backend::RouterOptions::Kind::kSigmoidGrouped;
  o.k = hp.n_expert_used;
  o.n_group = hp.deepseek().routing.n_group;
  o.topk_group = hp.deepseek().routing.topk_group;
  o.renormalize = hp.norm_topk_prob;
  o.scaling = static_cast<float>(hp.deepseek().routing.routed_scaling_factor);
  const Routing r = route_experts(be, logits, &ctx.w.get(layer_tensor_name(names.bias, layer)), o);
  Tensor out = moe_experts(ctx, layer, names.moe, x, r);
  if (!names.shared.gate.empty()) {
    Tensor shared = swiglu_mlp(ctx, names.shared, x);
    be.add(shared, out);
  }
  return out;
}

}  // namespace dayzero::model::blocks
