// The lightning indexer: projections on the backend, LayerNorm, RoPE, cache append, scores and
// the top-k selection on the host (plain loops; the CPU path is the reference).
#include "model/blocks/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "model/blocks/mla.h"
#include "model/blocks/block_util.h"

namespace dayzero::model::blocks {
namespace {

Tensor linear_host(backend::Backend& be, const Tensor& w, const Tensor& x) {
  Tensor y = be.empty(DType::kF32, {x.dim(0), w.dim(0)});
  be.matmul(x, w, y);
  Tensor h = Tensor::host(DType::kF32, y.shape());
  be.to_host(y, h);
  return h;
}

// f32 on the host whatever the device keeps (a bf16 norm weight widens exactly).

}  // namespace

IndexerNames indexer_names(int layer) {
  IndexerNames n;
  n.wq_b = L("model.layers.{L}.self_attn.indexer.wq_b.weight", layer);
  n.wk = L("model.layers.{L}.self_attn.indexer.wk.weight", layer);
  n.k_norm = L("model.layers.{L}.self_attn.indexer.k_norm.weight", layer);
  n.k_norm_bias = L("model.layers.{L}.self_attn.indexer.k_norm.bias", layer);
  n.weights_proj = L("model.layers.{L}.self_attn.indexer.weights_proj.weight", layer);
  return n;
}

std::vector<TensorSpec> indexer_specs(const HParams& hp, int layer) {
  if (hp.deepseek().dsa.reuses_topk(layer)) return {};
  const IndexerNames n = indexer_names(layer);
  const DsaParams& d = hp.deepseek().dsa;
  using R = ShardRule;
  std::vector<TensorSpec> s;
  s.push_back({n.wq_b, {d.index_n_heads * d.index_head_dim, hp.deepseek().mla.q_lora_rank}, R::kReplicated, layer});
  s.push_back({n.wk, {d.index_head_dim, hp.n_embd}, R::kReplicated, layer});
  s.push_back({n.k_norm, {d.index_head_dim}, R::kReplicated, layer});
  s.push_back({n.k_norm_bias, {d.index_head_dim}, R::kReplicated, layer});
  s.push_back({n.weights_proj, {d.index_n_heads, hp.n_embd}, R::kReplicated, layer});
  set_component(s, 0, Component::kAttention);
  s[2].component = Component::kNorm;
  s[3].component = Component::kNorm;
  return s;
}

std::vector<std::vector<int32_t>> dsa_select_keys(LayerContext& ctx, const IndexerNames& n, int layer, const Tensor& x,
                                                   const Tensor& q_resid) {
  auto& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n_tokens = x.dim(0), H = hp.deepseek().dsa.index_n_heads, D = hp.deepseek().dsa.index_head_dim;
  const int64_t rope = hp.deepseek().mla.qk_rope_head_dim, topk = hp.deepseek().dsa.index_topk;
  Tensor q = linear_host(be, ctx.w.get(n.wq_b), q_resid);       // [n_tokens, H * D]
  Tensor k = linear_host(be, ctx.w.get(n.wk), x);               // [n_tokens, D]
  Tensor wts = linear_host(be, ctx.w.get(n.weights_proj), x);   // [n_tokens, H]
  const Tensor g = host_copy(be, ctx.w.get(n.k_norm)), b = host_copy(be, ctx.w.get(n.k_norm_bias));
  // LayerNorm (torch: biased variance, eps 1e-6 as the indexer's nn.LayerNorm).
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* r = k.f32() + t * D;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += r[i];
    mean /= static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i) var += (r[i] - mean) * (r[i] - mean);
    var /= static_cast<double>(D);
    const double inv = 1.0 / std::sqrt(var + 1e-6);
    for (int64_t i = 0; i < D; ++i) r[i] = static_cast<float>((r[i] - mean) * inv) * g.f32()[i] + b.f32()[i];
  }
  Tensor pos_host = Tensor::host(DType::kI32, {n_tokens});
  be.to_host(ctx.positions, pos_host);
  const Tensor inv_host = host_copy(be, ctx.inv_freq);
  const auto* pos = static_cast<const int32_t*>(pos_host.data());
  const auto factor = static_cast<float>(rope_attention_factor(hp.rope_scaling));
  // The leading rope dims: half-split (rotate_half) in deepseek_v32, interleaved pairs in
  // glm_moe_dsa. An interleaved rotation writes its pairs back de-interleaved (rope_host), the
  // same permutation for q and k, so the scores are those of the rotation in place.
  const bool interleave = hp.deepseek().dsa.rope_interleave;
  rope_host(q.f32(), n_tokens, H, D, 0, rope, pos, inv_host.f32(), factor, interleave);
  rope_host(k.f32(), n_tokens, 1, D, 0, rope, pos, inv_host.f32(), factor, interleave);

  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(H));
  std::vector<std::vector<int32_t>> keep(static_cast<size_t>(n_tokens));
  Tensor ids = Tensor::host(DType::kF32, {n_tokens, topk});
  std::fill(ids.f32(), ids.f32() + n_tokens * topk, -1.0f);
  for (const SeqSegment& s : ctx.segments) {
    DZ_CHECK(s.index_k_cache != nullptr, "layer " << layer << ": the cache has no indexer keys");
    Tensor k_rows = Tensor::host(DType::kF32, {s.n_rows, D});
    std::memcpy(k_rows.f32(), k.f32() + s.row0 * D, static_cast<size_t>(s.n_rows * D) * 4);
    Tensor dst = s.index_k_cache->rows(s.pos0, s.pos0 + s.n_rows);
    be.copy(be.to_device(k_rows), dst);
    const int64_t n_keys = s.pos0 + s.n_rows;
    const Tensor keys = host_copy(be, s.index_k_cache->rows(0, n_keys));  // [n_keys, D]
    std::vector<float> score(static_cast<size_t>(n_keys));
    std::vector<int32_t> order(static_cast<size_t>(n_keys));
    for (int64_t r = 0; r < s.n_rows; ++r) {
      const int64_t row = s.row0 + r, p = s.pos0 + r, n_causal = p + 1;
      const float* w_row = wts.f32() + row * H;
      for (int64_t j = 0; j < n_causal; ++j) {
        const float* kj = keys.f32() + j * D;
        float acc = 0;
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = q.f32() + (row * H + h) * D;
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(qh[i]) * kj[i];
          acc += w_row[h] * w_scale * std::max(0.0f, static_cast<float>(dot) * scale);
        }
        score[static_cast<size_t>(j)] = acc;
      }
      const int64_t kept = std::min(topk, n_causal);
      std::iota(order.begin(), order.begin() + n_causal, 0);
      std::partial_sort(order.begin(), order.begin() + kept, order.begin() + n_causal, [&](int32_t a, int32_t c) {
        return score[static_cast<size_t>(a)] > score[static_cast<size_t>(c)] ||
               (score[static_cast<size_t>(a)] == score[static_cast<size_t>(c)] && a < c);
      });
      std::vector<int32_t>& sel = keep[static_cast<size_t>(row)];
      sel.assign(order.begin(), order.begin() + kept);
      std::sort(sel.begin(), sel.end());
      for (int64_t i = 0; i < kept; ++i) ids.f32()[row * topk + i] = static_cast<float>(sel[static_cast<size_t>(i)]);
    }
  }
  emit(ctx.sink, "layers." + std::to_string(layer) + ".index_topk_ids", be.to_device(ids));
  return keep;
}

std::vector<std::vector<int32_t>> dsa_layer_keys(LayerContext& ctx, int layer, const Tensor& x,
                                                  const Tensor& q_resid) {
  if (ctx.hp.deepseek().dsa.reuses_topk(layer)) {
    DZ_CHECK(ctx.dsa_keys != nullptr && static_cast<int64_t>(ctx.dsa_keys->size()) == x.dim(0),
             "layer " << layer << " reuses the previous layer's DSA selection, but no earlier layer of this stage "
                      "selected keys for these " << x.dim(0) << " rows");
    return *ctx.dsa_keys;
  }
  std::vector<std::vector<int32_t>> keep = dsa_select_keys(ctx, indexer_names(layer), layer, x, q_resid);
  if (ctx.dsa_keys) *ctx.dsa_keys = keep;
  return keep;
}

}  // namespace dayzero::model::blocks
