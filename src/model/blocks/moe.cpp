// Softmax-routed mixture of experts over this rank's experts.
#include "model/blocks/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/backend.h"

namespace dayzero::model::blocks {

Routing route_softmax_topk(const float* logits, int64_t n, int64_t n_expert, int64_t k, bool renormalize) {
  Routing r;
  r.ids.resize(static_cast<size_t>(n * k));
  r.weights.resize(static_cast<size_t>(n * k));
  std::vector<float> p(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * n_expert;
    const float mx = *std::max_element(row, row + n_expert);
    float z = 0;
    for (int64_t e = 0; e < n_expert; ++e) z += (p[e] = std::exp(row[e] - mx));
    for (auto& v : p) v /= z;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.ids[t * k + j] = order[j];
      r.weights[t * k + j] = renormalize ? p[order[j]] / sum : p[order[j]];
    }
  }
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
  Tensor logits_host = Tensor::host(DType::kF32, {n, ne});
  be.to_host(logits, logits_host);
  const Routing r = route_softmax_topk(logits_host.f32(), n, ne, k, hp.norm_topk_prob);
  return moe_experts(ctx, layer, names, x, r);
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
    const Tensor xe = be.to_device(xe_host);
    const int64_t ff = gate_w->dim(0);  // this rank's share of the expert (etp split)
    Tensor g = be.empty(DType::kF32, {m, ff}), u = be.empty(DType::kF32, {m, ff});
    be.matmul(xe, *gate_w, g);
    be.matmul(xe, ctx.w.get(expert_tensor_name(names.expert_up, layer, e)), u);
    be.swiglu(g, u, g);
    Tensor ye = be.empty(DType::kF32, {m, d});
    be.matmul(g, ctx.w.get(expert_tensor_name(names.expert_down, layer, e)), ye);
    Tensor ye_host = Tensor::host(DType::kF32, {m, d});
    be.to_host(ye, ye_host);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < d; ++c) out_host.f32()[rows[i] * d + c] += weight[i] * ye_host.f32()[i * d + c];
  }
  Tensor out = be.to_device(out_host);
  ctx.reduce_tp(out);
  return out;
}

}  // namespace dayzero::model::blocks
