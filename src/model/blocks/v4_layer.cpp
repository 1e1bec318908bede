// DeepSeek-V4's decoder layer over the runtime's tensors (v4_layer.h).
#include "model/blocks/v4_layer.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/blocks/block_util.h"
#include "model/blocks/mhc.h"
#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"
#include "model/blocks/row_linear.h"
#include "model/blocks/v4_indexer.h"
#include "model/blocks/v4_routing.h"

namespace dayzero::model::blocks {
namespace {

// A weight as f32 on the host (dequantised / widened from what the backend keeps).
std::vector<float> host_weight(const LayerContext& ctx, const std::string& name) {
  const Tensor h = host_copy(ctx.be, ctx.w.get(name));
  return {h.f32(), h.f32() + h.numel()};
}

std::vector<float> to_vector(backend::Backend& be, const Tensor& t) {
  const Tensor h = host_copy(be, t);
  return {h.f32(), h.f32() + h.numel()};
}

Tensor rows_tensor(backend::Backend& be, const std::vector<float>& v, int64_t n, int64_t width) {
  Tensor h = Tensor::host(DType::kF32, {n, width});
  std::memcpy(h.f32(), v.data(), v.size() * sizeof(float));
  return be.to_device(h);
}

// v4_rmsnorm over rows [n, width] with the weight w.
void rmsnorm_rows(std::vector<float>& x, int64_t n, int64_t width, const std::vector<float>& w, float eps) {
  for (int64_t r = 0; r < n; ++r) v4_rmsnorm(x.data() + r * width, width, w.data(), eps);
}

// The two rotaries: the sliding layers' (rope_theta, never scaled) and the compressed branches'
// (compress_rope_theta with the config's scaling).
std::vector<float> main_inv_freq(const HParams& hp) {
  HParams main = hp;
  main.rope_scaling = RopeScaling{};
  return rope_inv_freq(main);
}
std::vector<float> compress_inv_freq(const HParams& hp) {
  HParams compress = hp;
  compress.rope_theta = hp.deepseek_v4().compress_rope_theta;
  return rope_inv_freq(compress);
}

HyperConnectionSizes mixing_sizes(const HParams& hp, int64_t n) {
  const DeepseekV4Params& v = hp.deepseek_v4();
  return {n, v.hc_mult, hp.n_embd, v.hc_sinkhorn_iters, static_cast<float>(v.hc_eps), static_cast<float>(hp.rms_eps)};
}

// The attention of one layer over every segment of the call; returns this rank's partial output
// rows [n, d] (all-reduced by the caller) for the normed input x [n, d].
std::vector<float> attention_rows(LayerContext& ctx, int layer, const std::vector<float>& x, int64_t n) {
  const HParams& hp = ctx.hp;
  const DeepseekV4Params& v = hp.deepseek_v4();
  const std::string p = "layers." + std::to_string(layer) + ".";
  const int64_t d = hp.n_embd, hd = hp.head_dim;
  const float eps = static_cast<float>(hp.rms_eps);
  const V4Attention kind = v.layer_types[layer];
  const bool csa = kind == V4Attention::kCompressedSparse;
  const std::vector<float> wq_a = host_weight(ctx, p + "attn.wq_a.weight"), q_norm = host_weight(ctx, p + "attn.q_norm.weight");
  const std::vector<float> wq_b = host_weight(ctx, p + "attn.wq_b.weight"), wkv = host_weight(ctx, p + "attn.wkv.weight");
  const std::vector<float> kv_norm = host_weight(ctx, p + "attn.kv_norm.weight"), sinks = host_weight(ctx, p + "attn.attn_sink");
  const std::vector<float> wo_a = host_weight(ctx, p + "attn.wo_a.weight"), wo_b = host_weight(ctx, p + "attn.wo_b.weight");
  const std::vector<float> freq = kind == V4Attention::kSliding ? main_inv_freq(hp) : compress_inv_freq(hp);
  // This rank's heads and output groups (tp splits both; sizes.h's checks hold per rank).
  const V4AttentionSizes as{d, v.q_lora_rank, static_cast<int64_t>(sinks.size()), hd, v.rope_dim, v.sliding_window,
                            static_cast<int64_t>(wo_a.size()) / (v.o_lora_rank * (hp.n_head * hd / v.o_groups)),
                            v.o_lora_rank, eps};
  std::vector<float> cw[4], iw[6];
  if (kind != V4Attention::kSliding) {
    const char* names[] = {"wkv.weight", "wgate.weight", "ape", "norm.weight"};
    for (int i = 0; i < 4; ++i) cw[i] = host_weight(ctx, p + "attn.compressor." + names[i]);
    if (csa) {
      for (int i = 0; i < 4; ++i) iw[i] = host_weight(ctx, p + "attn.indexer.compressor." + names[i]);
      iw[4] = host_weight(ctx, p + "attn.indexer.wq_b.weight");
      iw[5] = host_weight(ctx, p + "attn.indexer.weights_proj.weight");
    }
  }
  std::vector<float> out(n * d, 0.0f);
  std::vector<float> picks_rows;  // [n, topk] as floats for the dump (CSA)
  if (csa) picks_rows.assign(n * v.index_topk, -1.0f);
  for (const SeqSegment& seg : ctx.segments) {
    auto* st = static_cast<V4LayerState*>(seg.layer_state);
    DZ_CHECK(st != nullptr, "deepseek_v4 layer " << layer << ": no layer state for the sequence");
    if (seg.pos0 == 0) {  // a new sequence starts from empty caches
      st->window.kv.clear();
      st->window.end = 0;
      for (CompressorState* c : {&st->kv, &st->index}) {
        c->pending_kv.clear();
        c->pending_gate.clear();
        c->overlap_kv.clear();
        c->overlap_gate.clear();
        c->entries.clear();
        c->n_entries = 0;
      }
    }
    DZ_CHECK(st->window.end == seg.pos0, "deepseek_v4 layer " << layer << ": a segment at position " << seg.pos0
                                                              << " after a cache that ends at " << st->window.end);
    const int64_t m = seg.n_rows;
    const std::span<const float> xs(x.data() + seg.row0 * d, static_cast<size_t>(m * d));
    V4Compressed cm;
    std::vector<int32_t> picks;
    if (kind != V4Attention::kSliding) {
      const CompressorSizes cs{d, hd, v.compress_rate(layer), csa ? 2 : 1, v.rope_dim, eps};
      compress_kv(cs, st->kv, xs, m, cw[0], cw[1], cw[2], cw[3], freq);
      cm = {st->kv.entries, st->kv.n_entries, cs.rate, {}, 0};
      if (csa) {
        const CompressorSizes ics{d, v.index_head_dim, v.csa_rate, 2, v.rope_dim, eps};
        compress_kv(ics, st->index, xs, m, iw[0], iw[1], iw[2], iw[3], freq);
        // The indexer's queries start from the attention's q residual (q_norm(wq_a x)).
        std::vector<float> qr(m * v.q_lora_rank);
        row_linear(xs.data(), m, d, wq_a.data(), v.q_lora_rank, qr.data());
        rmsnorm_rows(qr, m, v.q_lora_rank, q_norm, eps);
        const IndexerSizes is{d, v.q_lora_rank, v.index_n_heads, v.index_head_dim, v.rope_dim, v.csa_rate, v.index_topk};
        picks.assign(m * v.index_topk, -1);
        index_select(is, xs, qr, m, seg.pos0, st->index.entries, st->index.n_entries, iw[4], iw[5], freq, picks);
        cm.picks = picks;
        cm.topk = v.index_topk;
        for (int64_t i = 0; i < m * v.index_topk; ++i) picks_rows[seg.row0 * v.index_topk + i] = static_cast<float>(picks[i]);
      }
    }
    v4_attention(as, st->window, xs, m, wq_a, q_norm, wq_b, wkv, kv_norm, sinks, wo_a, wo_b, freq, cm,
                 std::span<float>(out.data() + seg.row0 * d, static_cast<size_t>(m * d)));
  }
  if (csa) emit(ctx.sink, p + "index_topk_ids", rows_tensor(ctx.be, picks_rows, n, v.index_topk));
  return out;
}

// The MoE of one layer for normed rows x [n, d] (on the device): routed experts plus the shared
// expert, reduced over the tp group.
Tensor ffn_rows(LayerContext& ctx, int layer, const Tensor& x) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const DeepseekV4Params& v = hp.deepseek_v4();
  const std::string p = "layers." + std::to_string(layer) + ".";
  const int64_t n = x.dim(0);
  MoeNames names;
  names.router = p + "ffn.gate.weight";
  names.expert_gate = p + "ffn.experts.{E}.w1.weight";
  names.expert_up = p + "ffn.experts.{E}.w3.weight";
  names.expert_down = p + "ffn.experts.{E}.w2.weight";
  Tensor logits = be.empty(DType::kF32, {n, hp.n_expert});
  be.matmul(x, ctx.w.get(names.router), logits);
  emit(ctx.sink, p + "router_logits", logits);
  const V4RouterOptions ro{v.scoring_func, hp.n_expert_used, static_cast<float>(v.routed_scaling_factor)};
  const std::vector<float> lg = to_vector(be, logits);
  const auto route = [&]() -> Result<Routing> {
    if (!v.hash_moe[layer]) return route_v4(lg, n, hp.n_expert, host_weight(ctx, p + "ffn.gate.bias"), {}, {}, ro);
    // Hash routing: the frozen table row of each row's token.
    const std::vector<float> table_f = host_weight(ctx, p + "ffn.gate.tid2eid");
    const std::vector<int32_t> table(table_f.begin(), table_f.end());
    const auto* ids = static_cast<const int32_t*>(ctx.token_ids.data());
    return route_v4(lg, n, hp.n_expert, {}, table, std::span<const int32_t>(ids, static_cast<size_t>(n)), ro);
  };
  const Result<Routing> r = route();
  DZ_CHECK(r.ok(), "deepseek_v4 layer " << layer << ": " << r.status().message());
  Tensor out = moe_experts(ctx, layer, names, x, *r);
  if (v.n_shared_experts > 0) {
    MlpNames shared;
    shared.gate = p + "ffn.shared_experts.w1.weight";
    shared.up = p + "ffn.shared_experts.w3.weight";
    shared.down = p + "ffn.shared_experts.w2.weight";
    be.add(swiglu_mlp(ctx, shared, x), out);
  }
  return out;
}

}  // namespace

std::unique_ptr<LayerState> v4_layer_state(const HParams& hp, int layer, int64_t n_ctx) {
  const DeepseekV4Params& v = hp.deepseek_v4();
  auto st = std::make_unique<V4LayerState>();
  const int64_t hd = hp.head_dim, rate = v.compress_rate(layer);
  const bool csa = v.layer_types[layer] == V4Attention::kCompressedSparse;
  st->window.kv.reserve(static_cast<size_t>(std::max<int64_t>(0, v.sliding_window - 1) * hd));
  int64_t floats = static_cast<int64_t>(st->window.kv.capacity());
  const auto reserve = [&](CompressorState& c, int64_t dim, int64_t coff) {
    c.entries.reserve(static_cast<size_t>(n_ctx / rate * dim));
    c.pending_kv.reserve(static_cast<size_t>(rate * coff * dim));
    c.pending_gate.reserve(static_cast<size_t>(rate * coff * dim));
    if (coff == 2) {
      c.overlap_kv.reserve(static_cast<size_t>(rate * dim));
      c.overlap_gate.reserve(static_cast<size_t>(rate * dim));
    }
    floats += static_cast<int64_t>(c.entries.capacity() + c.pending_kv.capacity() + c.pending_gate.capacity() +
                                   c.overlap_kv.capacity() + c.overlap_gate.capacity());
  };
  if (rate > 0) reserve(st->kv, hd, csa ? 2 : 1);
  if (csa) reserve(st->index, v.index_head_dim, 2);
  st->reserved = floats * static_cast<int64_t>(sizeof(float));
  return st;
}

void v4_layer(LayerContext& ctx, int layer, Tensor& hidden) {
  backend::Backend& be = ctx.be;
  const HParams& hp = ctx.hp;
  const int64_t n = hidden.dim(0), d = hp.n_embd;
  const float eps = static_cast<float>(hp.rms_eps);
  const std::string p = "layers." + std::to_string(layer) + ".";
  const HyperConnectionSizes hs = mixing_sizes(hp, n);
  DZ_CHECK(hidden.dim(1) == hs.hc * d, "deepseek_v4 layer " << layer << ": hidden " << shape_str(hidden.shape()));
  std::vector<float> streams = to_vector(be, hidden);
  std::vector<float> collapsed(n * d), post(n * hs.hc), comb(n * hs.hc * hs.hc);

  // Attention site.
  hyper_connection_pre(hs, streams, host_weight(ctx, p + "hc_attn_fn"), host_weight(ctx, p + "hc_attn_base"),
                       host_weight(ctx, p + "hc_attn_scale"), collapsed, post, comb);
  std::vector<float> x = collapsed;
  rmsnorm_rows(x, n, d, host_weight(ctx, p + "attn_norm.weight"), eps);
  emit(ctx.sink, p + "attn_norm", rows_tensor(be, x, n, d));
  Tensor attn = rows_tensor(be, attention_rows(ctx, layer, x, n), n, d);
  ctx.reduce_tp(attn);
  emit(ctx.sink, p + "attn_out", attn);
  hyper_connection_post(hs, streams, to_vector(be, attn), post, comb);

  // FFN site.
  hyper_connection_pre(hs, streams, host_weight(ctx, p + "hc_ffn_fn"), host_weight(ctx, p + "hc_ffn_base"),
                       host_weight(ctx, p + "hc_ffn_scale"), collapsed, post, comb);
  x = collapsed;
  rmsnorm_rows(x, n, d, host_weight(ctx, p + "ffn_norm.weight"), eps);
  const Tensor xf = rows_tensor(be, x, n, d);
  emit(ctx.sink, p + "ffn_norm", xf);
  const Tensor ffn = ffn_rows(ctx, layer, xf);
  emit(ctx.sink, p + "ffn_out", ffn);
  hyper_connection_post(hs, streams, to_vector(be, ffn), post, comb);

  Tensor h = Tensor::host(DType::kF32, hidden.shape());
  std::memcpy(h.f32(), streams.data(), streams.size() * sizeof(float));
  be.copy(be.to_device(h), hidden);
  emit(ctx.sink, p + "layer_out", hidden);
}

void v4_enter_streams(backend::Backend& be, const HParams& hp, const Tensor& embedded, Tensor& residual) {
  const int64_t n = embedded.dim(0), d = hp.n_embd, hc = hp.deepseek_v4().hc_mult;
  const Tensor e = host_copy(be, embedded);
  Tensor h = Tensor::host(DType::kF32, {n, hc * d});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hc; ++j) std::memcpy(h.f32() + (t * hc + j) * d, e.f32() + t * d, d * sizeof(float));
  be.copy(be.to_device(h), residual);
}

void v4_leave_streams(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& residual, Tensor& out,
                      ActivationSink* sink) {
  const int64_t n = residual.dim(0), d = hp.n_embd;
  const std::vector<float> streams = to_vector(be, residual);
  std::vector<float> rows(n * d);
  hyper_head(mixing_sizes(hp, n), streams, to_vector(be, w.get("hc_head_fn")), to_vector(be, w.get("hc_head_base")),
             to_vector(be, w.get("hc_head_scale")), rows);
  be.copy(rows_tensor(be, rows, n, d), out);
  emit(sink, "hc_head", out);
}

}  // namespace dayzero::model::blocks
