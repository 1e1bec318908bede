// Sigmoid, bias-steered, group-limited routing and the shared experts.
#include "model/blocks/moe_sigmoid.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"

namespace dayzero::model::blocks {

Routing route_sigmoid_group_topk(const float* logits, const float* bias, int64_t n, int64_t n_expert, int64_t k,
                                 const GroupRouteOptions& o) {
  Routing r;
  r.ids.resize(static_cast<size_t>(n * k));
  r.weights.resize(static_cast<size_t>(n * k));
  const int64_t per_group = n_expert / o.n_group;
  std::vector<float> score(n_expert), choice(n_expert), group_score(o.n_group);
  std::vector<int32_t> order(n_expert), groups(o.n_group);
  std::vector<char> group_on(o.n_group);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * n_expert;
    for (int64_t e = 0; e < n_expert; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-row[e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    for (int64_t g = 0; g < o.n_group; ++g) {
      const float* c = choice.data() + g * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int64_t i = 0; i < per_group; ++i) {
        if (c[i] > best) {
          second = best;
          best = c[i];
        } else if (c[i] > second) {
          second = c[i];
        }
      }
      group_score[g] = per_group >= 2 ? best + second : best;
    }
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int32_t a, int32_t b) { return group_score[a] > group_score[b]; });
    std::fill(group_on.begin(), group_on.end(), 0);
    for (int64_t g = 0; g < o.topk_group; ++g) group_on[groups[g]] = 1;
    std::iota(order.begin(), order.end(), 0);
    const auto masked = [&](int32_t e) { return group_on[e / per_group] ? choice[e] : -INFINITY; };
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return masked(a) > masked(b); });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += score[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.ids[t * k + j] = order[j];
      const float w = o.renormalize ? score[order[j]] / (sum + 1e-20f) : score[order[j]];
      r.weights[t * k + j] = w * o.scaling;
    }
  }
  return r;
}

std::vector<TensorSpec> group_moe_specs(const HParams& hp, int layer, const GroupMoeNames& n) {
  std::vector<TensorSpec> s = moe_specs(hp, layer, n.moe);
  s.push_back({layer_tensor_name(n.bias, layer), {hp.n_expert}, ShardRule::kReplicated, layer});
  s.back().component = Component::kRouter;
  const size_t shared_from = s.size();
  if (!n.shared.gate.empty()) {
    const int64_t ff = hp.group_routing.n_shared_experts * hp.n_ff_expert, d = hp.n_embd;
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
  Tensor logits_host = Tensor::host(DType::kF32, {n, ne});
  be.to_host(logits, logits_host);
  Tensor bias_host = Tensor::host(DType::kF32, {ne});
  be.to_host(ctx.w.get(layer_tensor_name(names.bias, layer)), bias_host);
  GroupRouteOptions o;
  o.n_group = hp.group_routing.n_group;
  o.topk_group = hp.group_routing.topk_group;
  o.renormalize = hp.norm_topk_prob;
  o.scaling = static_cast<float>(hp.group_routing.routed_scaling_factor);
  const Routing r = route_sigmoid_group_topk(logits_host.f32(), bias_host.f32(), n, ne, hp.n_expert_used, o);
  Tensor out = moe_experts(ctx, layer, names.moe, x, r);
  if (!names.shared.gate.empty()) {
    Tensor shared = swiglu_mlp(ctx, names.shared, x);
    be.add(shared, out);
  }
  return out;
}

}  // namespace dayzero::model::blocks
