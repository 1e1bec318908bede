// Llama-like decoder layer composed from the attention and MLP blocks.
#include "model/blocks/dense_decoder.h"

#include "model/blocks/attention.h"
#include "model/blocks/mlp.h"
#include "backend/backend.h"
#include "model/blocks/block_util.h"

namespace dayzero::model::blocks {
namespace {

AttentionNames attention_names(const HParams& hp, int layer) {
  AttentionNames n;
  n.q = L("model.layers.{L}.self_attn.q_proj.weight", layer);
  n.k = L("model.layers.{L}.self_attn.k_proj.weight", layer);
  n.v = L("model.layers.{L}.self_attn.v_proj.weight", layer);
  n.o = L("model.layers.{L}.self_attn.o_proj.weight", layer);
  if (hp.attn_qkv_bias) {
    n.q_bias = L("model.layers.{L}.self_attn.q_proj.bias", layer);
    n.k_bias = L("model.layers.{L}.self_attn.k_proj.bias", layer);
    n.v_bias = L("model.layers.{L}.self_attn.v_proj.bias", layer);
  }
  if (hp.attn_out_bias) n.o_bias = L("model.layers.{L}.self_attn.o_proj.bias", layer);
  if (hp.qk_norm) {
    n.q_norm = L("model.layers.{L}.self_attn.q_norm.weight", layer);
    n.k_norm = L("model.layers.{L}.self_attn.k_norm.weight", layer);
  }
  return n;
}

MlpNames mlp_names(const HParams& hp, int layer) {
  MlpNames n;
  n.gate = L("model.layers.{L}.mlp.gate_proj.weight", layer);
  n.up = L("model.layers.{L}.mlp.up_proj.weight", layer);
  n.down = L("model.layers.{L}.mlp.down_proj.weight", layer);
  if (hp.mlp_bias) {
    n.gate_bias = L("model.layers.{L}.mlp.gate_proj.bias", layer);
    n.up_bias = L("model.layers.{L}.mlp.up_proj.bias", layer);
    n.down_bias = L("model.layers.{L}.mlp.down_proj.bias", layer);
  }
  return n;
}

}  // namespace

std::vector<TensorSpec> dense_decoder_specs(const HParams& hp, int layer, bool with_mlp) {
  const int64_t d = hp.n_embd, hd = hp.head_dim, q_out = hp.n_head * hd, kv_out = hp.n_head_kv * hd;
  const AttentionNames a = attention_names(hp, layer);
  const MlpNames m = mlp_names(hp, layer);
  using R = ShardRule;
  using C = Component;
  std::vector<TensorSpec> s = {
      {L("model.layers.{L}.input_layernorm.weight", layer), {d}, R::kReplicated, layer},
      {a.q, {q_out, d}, R::kSplitDim0, layer, hd},
      {a.k, {kv_out, d}, R::kSplitDim0, layer, hd},
      {a.v, {kv_out, d}, R::kSplitDim0, layer, hd},
      {a.o, {d, q_out}, R::kSplitDim1, layer, hd},
      {L("model.layers.{L}.post_attention_layernorm.weight", layer), {d}, R::kReplicated, layer},
  };
  set_component(s, 1, C::kAttention);
  s.front().component = s.back().component = C::kNorm;
  if (with_mlp) {
    const size_t from = s.size();
    s.push_back({m.gate, {hp.n_ff, d}, R::kSplitDim0, layer});
    s.push_back({m.up, {hp.n_ff, d}, R::kSplitDim0, layer});
    s.push_back({m.down, {d, hp.n_ff}, R::kSplitDim1, layer});
    set_component(s, from, C::kMlp);
  }
  size_t from = s.size();
  if (hp.attn_qkv_bias) {
    s.push_back({a.q_bias, {q_out}, R::kSplitDim0, layer, hd});
    s.push_back({a.k_bias, {kv_out}, R::kSplitDim0, layer, hd});
    s.push_back({a.v_bias, {kv_out}, R::kSplitDim0, layer, hd});
  }
  if (hp.attn_out_bias) s.push_back({a.o_bias, {d}, R::kReplicated, layer});
  set_component(s, from, C::kAttention);
  from = s.size();
  if (hp.qk_norm) {
    s.push_back({a.q_norm, {hd}, R::kReplicated, layer});
    s.push_back({a.k_norm, {hd}, R::kReplicated, layer});
  }
  set_component(s, from, C::kNorm);
  from = s.size();
  if (hp.mlp_bias && with_mlp) {
    s.push_back({m.gate_bias, {hp.n_ff}, R::kSplitDim0, layer});
    s.push_back({m.up_bias, {hp.n_ff}, R::kSplitDim0, layer});
    s.push_back({m.down_bias, {d}, R::kReplicated, layer});
  }
  set_component(s, from, C::kMlp);
  return s;
}

std::vector<TensorSpec> dense_model_specs(const HParams& hp) {
  std::vector<TensorSpec> s = {
      {"model.embed_tokens.weight", {hp.n_vocab, hp.n_embd}, ShardRule::kVocabSplit, -1},
      {"model.norm.weight", {hp.n_embd}, ShardRule::kReplicated, -1},
  };
  s[0].component = Component::kEmbedding;
  s[1].component = Component::kNorm;
  if (!hp.tie_embeddings) s.push_back({"lm_head.weight", {hp.n_vocab, hp.n_embd}, ShardRule::kVocabSplit, -1});
  set_component(s, 2, Component::kLmHead);
  return s;
}

void dense_decoder_layer(LayerContext& ctx, int layer, Tensor& hidden, const FfnFn& ffn_fn) {
  auto& be = ctx.be;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  const float eps = static_cast<float>(ctx.hp.rms_eps);
  Tensor x = be.empty_output(DType::kF32, hidden.shape());
  be.rmsnorm(hidden, ctx.w.get(L("model.layers.{L}.input_layernorm.weight", layer)), eps, x);
  emit(ctx.sink, prefix + "attn_norm", x);
  Tensor attn = attention(ctx, attention_names(ctx.hp, layer), x);
  emit(ctx.sink, prefix + "attn_out", attn);
  be.add_rmsnorm(attn, hidden, ctx.w.get(L("model.layers.{L}.post_attention_layernorm.weight", layer)), eps, x);
  emit(ctx.sink, prefix + "ffn_norm", x);
  Tensor ffn = ffn_fn ? ffn_fn(ctx, layer, x) : swiglu_mlp(ctx, mlp_names(ctx.hp, layer), x);
  emit(ctx.sink, prefix + "ffn_out", ffn);
  be.add(ffn, hidden);
  emit(ctx.sink, prefix + "layer_out", hidden);
}

}  // namespace dayzero::model::blocks
