// Softmax-routed mixture of experts over this rank's experts.
#include "model/blocks/moe.h"

#include <cstring>

#include "backend/backend.h"
#include "model/blocks/mlp.h"

namespace dayzero::model::blocks {

Routing route_experts(backend::Backend& be, const Tensor& logits, const Tensor* bias, const backend::RouterOptions& o) {
  const int64_t n = logits.dim(0);
  Tensor ids = be.empty_output(DType::kI32, {n, o.k}), weights = be.empty_output(DType::kF32, {n, o.k});
  be.route_topk(logits, bias, o, ids, weights);
  Routing r;
  r.ids.resize(static_cast<size_t>(n * o.k));
  r.weights.resize(static_cast<size_t>(n * o.k));
  if (n == 0) return r;
  Tensor ids_host = Tensor::host(DType::kI32, {n, o.k}), weights_host = Tensor::host(DType::kF32, {n, o.k});
  be.to_host(ids, ids_host);
  be.to_host(weights, weights_host);
  std::memcpy(r.ids.data(), ids_host.data(), r.ids.size() * sizeof(int32_t));
  std::memcpy(r.weights.data(), weights_host.data(), r.weights.size() * sizeof(float));
  return r;
}

std::vector<TensorSpec> moe_specs(const HParams& hp, int layer, const MoeNames& n) {
  std::vector<TensorSpec> s;
  s.push_back({layer_tensor_name(n.router, layer), {hp.n_expert, hp.n_embd}, ShardRule::kReplicated, layer});
  s.back().component = Component::kRouter;
  const auto ne = static_cast<int>(hp.n_expert);
  for (int e = 0; e < ne; ++e) {
    const auto spec = [&](const std::string& tmpl, Shape shape, int split_dim) {
      TensorSpec t{expert_tensor_name(tmpl, layer, e), std::move(shape), ShardRule::kExpertOwned, layer};
      t.expert = e;
      t.n_expert = ne;
      t.expert_split_dim = split_dim;
      t.component = Component::kRoutedExpert;
      return t;
    };
    s.push_back(spec(n.expert_gate, {hp.n_ff_expert, hp.n_embd}, 0));
    s.push_back(spec(n.expert_up, {hp.n_ff_expert, hp.n_embd}, 0));
    s.push_back(spec(n.expert_down, {hp.n_embd, hp.n_ff_expert}, 1));
  }
  return s;
}

Tensor moe_ffn(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n = x.dim(0), ne = hp.n_expert, k = hp.n_expert_used;
  const std::string prefix = "layers." + std::to_string(layer) + ".";

  Tensor logits = be.empty(DType::kF32, {n, ne});
  be.matmul(x, ctx.w.get(layer_tensor_name(names.router, layer)), logits);
  emit(ctx.sink, prefix + "router_logits", logits);
  backend::RouterOptions o;
  o.kind = backend::RouterOptions::Kind::kSoftmax;
  o.k = k;
  o.renormalize = hp.norm_topk_prob;
  return moe_experts(ctx, layer, names, x, route_experts(be, logits, nullptr, o));
}

Tensor moe_experts(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x, const Routing& r) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n = x.dim(0), d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  if (ctx.expert_tokens) {
    auto& counts = (*ctx.expert_tokens)[layer];
    counts.resize(static_cast<size_t>(ne), 0);
    for (int32_t e : r.ids) ++counts[e];
  }
  if (ctx.sink && ctx.sink->wants(prefix + "topk_ids")) {
    Tensor ids = Tensor::host(DType::kF32, {n, k});
    for (int64_t i = 0; i < n * k; ++i) ids.f32()[i] = static_cast<float>(r.ids[i]);
    ctx.sink->put(prefix + "topk_ids", be.to_device(ids));
  }
  if (ctx.expert_group) return moe_dispatched(ctx, layer, names, x, r);

  Tensor x_host = Tensor::host(DType::kF32, {n, d});
  be.to_host(x, x_host);
  Tensor out_host = Tensor::host(DType::kF32, {n, d});
  for (int e = 0; e < static_cast<int>(ne); ++e) {
    const Tensor* gate_w = ctx.w.find(expert_tensor_name(names.expert_gate, layer, e));
    if (!gate_w) continue;  // another ep rank owns this expert
    std::vector<int64_t> rows;
    std::vector<float> weight;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (r.ids[t * k + j] == e) {
          rows.push_back(t);
          weight.push_back(r.weights[t * k + j]);
        }
    if (rows.empty()) continue;
    const auto m = static_cast<int64_t>(rows.size());
    Tensor xe_host = Tensor::host(DType::kF32, {m, d});
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(xe_host.f32() + i * d, x_host.f32() + rows[i] * d, static_cast<size_t>(d) * 4);
    const Tensor ye_host = run_expert(ctx, layer, e, names, *gate_w, xe_host);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < d; ++c) out_host.f32()[rows[i] * d + c] += weight[i] * ye_host.f32()[i * d + c];
  }
  Tensor out = be.to_device(out_host);
  ctx.reduce_tp(out);
  return out;
}

Tensor run_expert(LayerContext& ctx, int layer, int expert, const MoeNames& names, const Tensor& gate_w,
                  const Tensor& xe_host) {
  backend::Backend& be = ctx.be;
  const int64_t m = xe_host.dim(0), d = ctx.hp.n_embd;
  const Tensor xe = be.to_device(xe_host);
  const int64_t ff = gate_w.dim(0);  // this rank's share of the expert (etp split)
  Tensor g = be.empty(DType::kF32, {m, ff}), u = be.empty(DType::kF32, {m, ff});
  const Tensor* ws[] = {&gate_w, &ctx.w.get(expert_tensor_name(names.expert_up, layer, expert))};
  Tensor* ys[] = {&g, &u};
  be.matmul_shared_x(xe, ws, ys);
  swiglu_limited(be, ctx.hp.swiglu_limit, g, u);
  Tensor ye = be.empty(DType::kF32, {m, d});
  be.matmul(g, ctx.w.get(expert_tensor_name(names.expert_down, layer, expert)), ye);
  Tensor ye_host = Tensor::host(DType::kF32, {m, d});
  be.to_host(ye, ye_host);
  return ye_host;
}

}  // namespace dayzero::model::blocks
