// deepseek_v4: DeepSeek-V4 (V4-Flash, V4-Pro and their -Base siblings) as published: the config
// (hc_mult residual streams with Sinkhorn-Knopp mixing, hybrid attention per layer_types —
// sliding window, compressed sparse (CSA, with a lightning indexer) and heavily compressed (HCA) —
// one shared K=V head of head_dim, q LoRA, partial interleaved rotary with rope_theta and
// compress_rope_theta, attention sinks, the grouped output projection, sqrtsoftplus and
// hash-routed experts with a shared expert, MTP layers), the tensors in the checkpoint's own
// names (embed.weight, layers.N.attn.wq_a.weight + .scale, layers.N.ffn.gate.tid2eid, mtp.N.*),
// and the layer descriptors (window, compressed entries, indexer keys, compressor tails) the
// planner and memory model count. The blocks of its layer are model/blocks/mhc, v4_attention,
// v4_compressor, v4_indexer and v4_routing, composed into a layer by blocks/v4_layer (the
// residual streams are the runtime's hidden state: residual_width). FP8 Linears with UE8M0
// `.scale` tensors are kept as stored as deepseek_v3's FP8 are, its MXFP4 routed experts (codes in
// `.weight`, UE8M0 scales per 32 in `.scale`, model/fp4_specs) as every FP4 expert is.
// HF reference: transformers/models/deepseek_v4 (5.25) and its conversion_mapping.py entry.
#include <cmath>

#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/v4_layer.h"
#include "model/fp4_specs.h"

namespace dayzero::model {
namespace {

using R = ShardRule;

// One entry of rope_parameters (or a flat rope_scaling) as HF's rope utilities read it.
// parse_rope_scaling, restricted to what V4 runs: plain RoPE or YaRN, cos/sin never scaled by
// YaRN's mscale (transformers injects attention_factor 1.0 for this family).
Result<RopeScaling> read_rope(const nlohmann::json& rs, const std::string& where) {
  DZ_ASSIGN_OR_RETURN(RopeScaling s, parse_rope_scaling(rs, where));
  if (s.type != "default" && s.type != "yarn")
    return Status::Unsupported("config.json: " + where + " rope_type '" + s.type +
                               "' is not supported for deepseek_v4 (supported: default, yarn)");
  if (!rs.contains("attention_factor")) s.attention_factor = 1.0;
  if (s.type == "yarn" && s.attention_factor != 1.0)
    return Status::Unsupported("config.json: " + where + " attention_factor " + std::to_string(s.attention_factor) +
                               " is not supported for deepseek_v4 (its reference leaves cos/sin unscaled: 1.0)");
  return s;
}

V4Attention attention_kind(const std::string& t, bool* ok) {
  *ok = true;
  if (t == "sliding_attention") return V4Attention::kSliding;
  if (t == "compressed_sparse_attention") return V4Attention::kCompressedSparse;
  if (t == "heavily_compressed_attention") return V4Attention::kHeavilyCompressed;
  *ok = false;
  return V4Attention::kSliding;
}

class DeepseekV4Adapter final : public Adapter {
 public:
  const char* family() const override { return "deepseek_v4"; }
  std::vector<std::string> architectures() const override { return {"DeepseekV4ForCausalLM"}; }
  std::string embed_name() const override { return "embed.weight"; }
  std::string final_norm_name() const override { return "norm.weight"; }
  std::string lm_head_name(const HParams& hp) const override { return hp.tie_embeddings ? embed_name() : "head.weight"; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override;
  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override;
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override;

  Status forward_support(const HParams& hp) const override { return Status::Ok(); }
  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override { blocks::v4_layer(ctx, layer, hidden); }
  // The hc_mult residual streams of every row (mHC).
  int64_t residual_width(const HParams& hp) const override { return hp.deepseek_v4().hc_mult * hp.n_embd; }
  void enter_residual(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& embedded,
                      Tensor& residual) const override {
    blocks::v4_enter_streams(be, hp, embedded, residual);
  }
  void leave_residual(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& residual, Tensor& out,
                      ActivationSink* sink) const override {
    blocks::v4_leave_streams(be, hp, w, residual, out, sink);
  }
  std::unique_ptr<LayerState> new_layer_state(const HParams& hp, int layer, int64_t n_ctx, int tp) const override {
    return blocks::v4_layer_state(hp, layer, n_ctx);
  }

  nlohmann::json make_config(const ModelShape& s) const override;
  void fill_tiny_defaults(ModelShape& s) const override {
    if (s.n_expert == 0) s.n_expert = 8;
    if (s.n_expert_used == 0) s.n_expert_used = 2;
    if (s.n_ff_expert == 0) s.n_ff_expert = std::max<int64_t>(1, s.n_ff / 2);
  }

 private:
  // Tensors of one block (attention, mHC, FFN) under prefix ("layers.3." or "mtp.0.").
  void block_specs(const HParams& hp, const std::string& prefix, int layer, V4Attention kind, bool hash,
                   std::vector<TensorSpec>& s) const;
};

Result<HParams> DeepseekV4Adapter::parse_hparams(const nlohmann::json& c) const {
  if (!c.is_object()) return Status::InvalidArgument(std::string("config.json: top level is not an object"));
  HParams hp;
  hp.raw = c;
  hp.family = family();
  DZ_ASSIGN_OR_RETURN(hp.model_type, json_string_or(c, "model_type", ""));
  DZ_ASSIGN_OR_RETURN(hp.n_vocab, json_int(c, "vocab_size"));
  DZ_ASSIGN_OR_RETURN(hp.n_embd, json_int(c, "hidden_size"));
  DZ_ASSIGN_OR_RETURN(hp.n_layer, json_int(c, "num_hidden_layers"));
  DZ_ASSIGN_OR_RETURN(hp.n_head, json_int(c, "num_attention_heads"));
  DZ_ASSIGN_OR_RETURN(hp.n_head_kv, json_int_or(c, "num_key_value_heads", 1));
  if (hp.n_head_kv != 1)
    return Status::InvalidArgument("config.json: deepseek_v4 num_key_value_heads must be 1 (one shared K=V head), got " +
                                   std::to_string(hp.n_head_kv));
  DZ_ASSIGN_OR_RETURN(hp.head_dim, json_int(c, "head_dim"));
  DZ_ASSIGN_OR_RETURN(hp.max_position, json_int_or(c, "max_position_embeddings", 1048576));
  DZ_ASSIGN_OR_RETURN(hp.rms_eps, json_double_or(c, "rms_norm_eps", 1e-6));
  DZ_ASSIGN_OR_RETURN(hp.tie_embeddings, json_bool_or(c, "tie_word_embeddings", false));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    DZ_ASSIGN_OR_RETURN(const bool on, json_bool_or(c, key, false));
    if (on) return Status::Unsupported(std::string("config.json: deepseek_v4 ") + key + "=true is not supported");
  }
  DZ_ASSIGN_OR_RETURN(const std::string act, json_string_or(c, "hidden_act", "silu"));
  if (act != "silu") return Status::Unsupported("config.json: deepseek_v4 hidden_act '" + act + "' is not supported");

  DeepseekV4Params& v = hp.family_params.emplace<DeepseekV4Params>();
  DZ_ASSIGN_OR_RETURN(v.hc_mult, json_int_or(c, "hc_mult", 4));
  if (v.hc_mult < 1)
    return Status::InvalidArgument("config.json: key 'hc_mult' must be at least 1 (residual streams), got " +
                                   std::to_string(v.hc_mult));
  DZ_ASSIGN_OR_RETURN(v.hc_sinkhorn_iters, json_int_or(c, "hc_sinkhorn_iters", 20));
  if (v.hc_sinkhorn_iters < 1)
    return Status::InvalidArgument("config.json: key 'hc_sinkhorn_iters' must be at least 1, got " +
                                   std::to_string(v.hc_sinkhorn_iters));
  DZ_ASSIGN_OR_RETURN(v.hc_eps, json_double_or(c, "hc_eps", 1e-6));
  DZ_ASSIGN_OR_RETURN(v.q_lora_rank, json_int(c, "q_lora_rank"));
  DZ_ASSIGN_OR_RETURN(v.sliding_window, json_int(c, "sliding_window"));
  DZ_ASSIGN_OR_RETURN(v.o_groups, json_int(c, "o_groups"));
  DZ_ASSIGN_OR_RETURN(v.o_lora_rank, json_int(c, "o_lora_rank"));
  if ((hp.n_head * hp.head_dim) % v.o_groups != 0 || hp.n_head % v.o_groups != 0)
    return Status::InvalidArgument("config.json: num_attention_heads " + std::to_string(hp.n_head) +
                                   " is not a multiple of o_groups " + std::to_string(v.o_groups));
  DZ_ASSIGN_OR_RETURN(v.index_n_heads, json_int(c, "index_n_heads"));
  DZ_ASSIGN_OR_RETURN(v.index_head_dim, json_int(c, "index_head_dim"));
  DZ_ASSIGN_OR_RETURN(v.index_topk, json_int(c, "index_topk"));

  // Partial rotary: the trailing head_dim * partial_rotary_factor channels (qk_rope_head_dim of
  // older configs), interleaved pairs.
  DZ_ASSIGN_OR_RETURN(const int64_t legacy_rope_dim, json_int_or(c, "qk_rope_head_dim", 64));
  DZ_ASSIGN_OR_RETURN(const double prf,
                      json_double_or(c, "partial_rotary_factor", static_cast<double>(legacy_rope_dim) / hp.head_dim));
  v.rope_dim = static_cast<int64_t>(hp.head_dim * prf);
  if (v.rope_dim <= 0 || v.rope_dim % 2 != 0 || v.rope_dim > hp.head_dim)
    return Status::InvalidArgument("config.json: partial_rotary_factor " + std::to_string(prf) + " of head_dim " +
                                   std::to_string(hp.head_dim) + " gives " + std::to_string(v.rope_dim) +
                                   " rotary channels; they must be even, positive and at most head_dim");
  hp.rope_dim = v.rope_dim;

  // Two rotaries: "main" (sliding layers, rope_theta, never scaled) and "compress" (CSA / HCA
  // layers and their compressors, compress_rope_theta, YaRN when the config scales it).
  DZ_ASSIGN_OR_RETURN(hp.rope_theta, json_double_or(c, "rope_theta", 10000.0));
  DZ_ASSIGN_OR_RETURN(v.compress_rope_theta, json_double_or(c, "compress_rope_theta", 160000.0));
  const nlohmann::json* rp = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (auto it = c.find(key); it != c.end() && !it->is_null()) rp = &*it;
  if (rp && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
    DZ_ASSIGN_OR_RETURN(const RopeScaling main, read_rope((*rp)["main"], "rope_parameters.main"));
    if (main.type != "default")
      return Status::Unsupported("config.json: rope_parameters.main rope_type '" + main.type +
                                 "' is not supported for deepseek_v4 (its sliding layers use plain RoPE)");
    DZ_ASSIGN_OR_RETURN(hp.rope_theta, json_double_or((*rp)["main"], "rope_theta", hp.rope_theta));
    DZ_ASSIGN_OR_RETURN(hp.rope_scaling, read_rope((*rp)["compress"], "rope_parameters.compress"));
    DZ_ASSIGN_OR_RETURN(v.compress_rope_theta, json_double_or((*rp)["compress"], "rope_theta", v.compress_rope_theta));
    for (const char* part : {"main", "compress"}) {
      DZ_ASSIGN_OR_RETURN(const double f, json_double_or((*rp)[part], "partial_rotary_factor", prf));
      if (f != prf)
        return Status::Unsupported(std::string("config.json: rope_parameters.") + part + ".partial_rotary_factor " +
                                   std::to_string(f) + " differs from partial_rotary_factor " + std::to_string(prf));
    }
  } else if (rp) {
    // A flat rope_scaling / rope_parameters scales the compressed branches only (transformers).
    DZ_ASSIGN_OR_RETURN(hp.rope_scaling, read_rope(*rp, "rope_scaling"));
  }

  // compress_rates (and the older compress_rate_csa / compress_rate_hca).
  v.csa_rate = 4;
  v.hca_rate = 128;
  if (auto it = c.find("compress_rates"); it != c.end() && !it->is_null()) {
    if (!it->is_object()) return Status::InvalidArgument("config.json: key 'compress_rates' must be an object");
    for (const auto& [k, val] : it->items()) {
      if (!val.is_number_integer() || val.get<int64_t>() < 1)
        return Status::InvalidArgument("config.json: compress_rates['" + k + "'] must be a positive integer");
      if (k == "compressed_sparse_attention") v.csa_rate = val.get<int64_t>();
      else if (k == "heavily_compressed_attention") v.hca_rate = val.get<int64_t>();
      else
        return Status::InvalidArgument("config.json: compress_rates key '" + k +
                                       "' is not a deepseek_v4 layer type (compressed_sparse_attention, "
                                       "heavily_compressed_attention)");
    }
  }
  DZ_ASSIGN_OR_RETURN(v.csa_rate, json_int_or(c, "compress_rate_csa", v.csa_rate));
  DZ_ASSIGN_OR_RETURN(v.hca_rate, json_int_or(c, "compress_rate_hca", v.hca_rate));

  // layer_types: explicit, else the older per-layer compress_ratios (0 / csa / hca), else
  // transformers' default (two HCA layers, then CSA / HCA alternating).
  const int n = static_cast<int>(hp.n_layer);
  if (auto it = c.find("layer_types"); it != c.end() && !it->is_null()) {
    if (!it->is_array()) return Status::InvalidArgument("config.json: key 'layer_types' must be a list");
    if (static_cast<int64_t>(it->size()) < hp.n_layer)
      return Status::InvalidArgument("config.json: layer_types has " + std::to_string(it->size()) +
                                     " entries for num_hidden_layers " + std::to_string(hp.n_layer));
    for (int l = 0; l < n; ++l) {
      const auto& e = (*it)[l];
      bool ok = e.is_string();
      const V4Attention k = ok ? attention_kind(e.get<std::string>(), &ok) : V4Attention::kSliding;
      if (!ok)
        return Status::InvalidArgument("config.json: layer_types[" + std::to_string(l) + "] " + e.dump() +
                                       " is not a deepseek_v4 attention type (sliding_attention, "
                                       "compressed_sparse_attention, heavily_compressed_attention)");
      v.layer_types.push_back(k);
    }
  } else if (auto r = c.find("compress_ratios"); r != c.end() && !r->is_null()) {
    if (!r->is_array() || static_cast<int64_t>(r->size()) < hp.n_layer)
      return Status::InvalidArgument("config.json: key 'compress_ratios' must list one ratio per layer");
    for (int l = 0; l < n; ++l) {
      const auto& e = (*r)[l];
      const int64_t x = e.is_number_integer() ? e.get<int64_t>() : -1;
      if (x == 0) v.layer_types.push_back(V4Attention::kSliding);
      else if (x == v.csa_rate) v.layer_types.push_back(V4Attention::kCompressedSparse);
      else if (x == v.hca_rate) v.layer_types.push_back(V4Attention::kHeavilyCompressed);
      else
        return Status::InvalidArgument("config.json: compress_ratios[" + std::to_string(l) + "] " + e.dump() +
                                       " is neither 0, the CSA rate nor the HCA rate");
    }
  } else {
    for (int l = 0; l < n; ++l)
      v.layer_types.push_back(l < 2 || l % 2 == 0 ? V4Attention::kHeavilyCompressed : V4Attention::kCompressedSparse);
  }

  // Experts.
  DZ_ASSIGN_OR_RETURN(hp.n_expert, json_int(c, "n_routed_experts"));
  DZ_ASSIGN_OR_RETURN(hp.n_expert_used, json_int(c, "num_experts_per_tok"));
  DZ_ASSIGN_OR_RETURN(hp.n_ff_expert, json_int(c, "moe_intermediate_size"));
  if (hp.n_expert_used > hp.n_expert)
    return Status::InvalidArgument("config.json: num_experts_per_tok exceeds n_routed_experts");
  hp.n_ff = hp.n_ff_expert;  // no dense layer: the shared expert's width per shared expert
  DZ_ASSIGN_OR_RETURN(hp.norm_topk_prob, json_bool_or(c, "norm_topk_prob", true));
  if (!hp.norm_topk_prob)
    return Status::Unsupported("config.json: deepseek_v4 norm_topk_prob=false is not supported (the reference "
                               "always renormalises the chosen experts' scores)");
  DZ_ASSIGN_OR_RETURN(v.routed_scaling_factor, json_double_or(c, "routed_scaling_factor", 1.5));
  DZ_ASSIGN_OR_RETURN(v.n_shared_experts, json_int_or(c, "n_shared_experts", 1));
  if (v.n_shared_experts < 0) return Status::InvalidArgument("config.json: key 'n_shared_experts' must be >= 0");
  DZ_ASSIGN_OR_RETURN(v.scoring_func, json_string_or(c, "scoring_func", "sqrtsoftplus"));
  if (v.scoring_func != "sqrtsoftplus" && v.scoring_func != "softmax" && v.scoring_func != "sigmoid")
    return Status::Unsupported("config.json: deepseek_v4 scoring_func '" + v.scoring_func +
                               "' is not supported (sqrtsoftplus, softmax, sigmoid)");
  DZ_ASSIGN_OR_RETURN(hp.swiglu_limit, json_double_or(c, "swiglu_limit", 10.0));
  if (hp.swiglu_limit < 0) return Status::InvalidArgument("config.json: key 'swiglu_limit' must be >= 0");
  if (auto it = c.find("mlp_layer_types"); it != c.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) < hp.n_layer)
      return Status::InvalidArgument("config.json: key 'mlp_layer_types' must list one type per layer");
    for (int l = 0; l < n; ++l) {
      const auto& e = (*it)[l];
      if (e == "hash_moe") v.hash_moe.push_back(true);
      else if (e == "moe") v.hash_moe.push_back(false);
      else
        return Status::InvalidArgument("config.json: mlp_layer_types[" + std::to_string(l) + "] " + e.dump() +
                                       " is not a deepseek_v4 MLP type (hash_moe, moe)");
    }
  } else {
    DZ_ASSIGN_OR_RETURN(const int64_t n_hash, json_int_or(c, "num_hash_layers", 3));
    for (int l = 0; l < n; ++l) v.hash_moe.push_back(l < n_hash);
  }
  DZ_ASSIGN_OR_RETURN(hp.n_nextn_layer, json_int_or(c, "num_nextn_predict_layers", 0));
  if (hp.n_nextn_layer < 0) return Status::InvalidArgument("config.json: key 'num_nextn_predict_layers' must be >= 0");

  // Weights as published: FP8 (E4M3) Linears with UE8M0 block scales named X.scale; routed
  // experts in FP4 in the release.
  if (auto q = c.find("quantization_config"); q != c.end() && !q->is_null()) {
    if (!q->is_object()) return Status::InvalidArgument("config.json: key 'quantization_config' must be an object");
    DZ_ASSIGN_OR_RETURN(const std::string method, json_string_or(*q, "quant_method", ""));
    if (method != "fp8")
      return Status::Unsupported("config.json: deepseek_v4 quantization_config.quant_method '" + method +
                                 "' is not supported (fp8)");
    // The release's routed experts: FP4 (MXFP4 codes in `.weight`, UE8M0 scales per 32 in `.scale`).
    DZ_ASSIGN_OR_RETURN(const std::string expert_dtype, json_string_or(*q, "expert_dtype", ""));
    if (!expert_dtype.empty() && expert_dtype != "fp8" && expert_dtype != "fp4")
      return Status::Unsupported("config.json: quantization_config.expert_dtype '" + expert_dtype +
                                 "' is not supported (fp8, fp4)");
    v.fp4_experts = expert_dtype == "fp4";
    DZ_ASSIGN_OR_RETURN(const std::string fmt, json_string_or(*q, "fmt", "e4m3"));
    if (fmt != "e4m3") return Status::Unsupported("config.json: quantization_config.fmt '" + fmt + "' is not supported (e4m3)");
    // The release's block scales are UE8M0 (F8_E8M0 `.scale` tensors, powers of two, one byte on
    // disk); a backend keeps each as an f32 scale, which is what the planner counts.
    DZ_ASSIGN_OR_RETURN(const std::string scale_fmt, json_string_or(*q, "scale_fmt", ""));
    if (scale_fmt != "ue8m0")
      return Status::Unsupported("config.json: deepseek_v4 quantization_config.scale_fmt '" + scale_fmt +
                                 "' is not the published 'ue8m0'");
    auto bs = q->find("weight_block_size");
    if (bs == q->end() || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
        !(*bs)[1].is_number_integer() || (*bs)[0].get<int64_t>() < 1 || (*bs)[1].get<int64_t>() < 1)
      return Status::InvalidArgument("config.json: quantization_config.weight_block_size must be two positive integers");
    hp.quant_block_rows = (*bs)[0].get<int64_t>();
    hp.quant_block_cols = (*bs)[1].get<int64_t>();
    hp.quant_scale_ue8m0 = true;
  }
  return hp;
}

void DeepseekV4Adapter::block_specs(const HParams& hp, const std::string& prefix, int layer, V4Attention kind,
                                    bool hash, std::vector<TensorSpec>& s) const {
  const DeepseekV4Params& v = hp.deepseek_v4();
  const int64_t d = hp.n_embd, hd = hp.head_dim, hc = v.hc_mult, mix = (2 + hc) * hc;
  const auto add = [&](const std::string& name, Shape shape, R rule, Component comp, int64_t block = 1) {
    TensorSpec t{prefix + name, std::move(shape), rule, layer};
    t.component = comp;
    t.shard_block = block;
    s.push_back(std::move(t));
  };
  add("attn_norm.weight", {d}, R::kReplicated, Component::kNorm);
  add("ffn_norm.weight", {d}, R::kReplicated, Component::kNorm);
  for (const char* site : {"attn", "ffn"}) {
    const std::string p = std::string("hc_") + site + "_";
    add(p + "fn", {mix, hc * d}, R::kReplicated, Component::kAttention);
    add(p + "base", {mix}, R::kReplicated, Component::kAttention);
    add(p + "scale", {3}, R::kReplicated, Component::kAttention);
  }
  // Attention: q heads (their sinks, wq_b rows, wo_a groups) split over tp; the one K=V head,
  // the q LoRA and the compressors held whole.
  add("attn.attn_sink", {hp.n_head}, R::kSplitDim0, Component::kAttention);
  add("attn.wq_a.weight", {v.q_lora_rank, d}, R::kReplicated, Component::kAttention);
  add("attn.q_norm.weight", {v.q_lora_rank}, R::kReplicated, Component::kNorm);
  add("attn.wq_b.weight", {hp.n_head * hd, v.q_lora_rank}, R::kSplitDim0, Component::kAttention, hd);
  add("attn.wkv.weight", {hd, d}, R::kReplicated, Component::kAttention);
  add("attn.kv_norm.weight", {hd}, R::kReplicated, Component::kNorm);
  add("attn.wo_a.weight", {v.o_groups * v.o_lora_rank, hp.n_head * hd / v.o_groups}, R::kSplitDim0,
      Component::kAttention, v.o_lora_rank);
  add("attn.wo_b.weight", {d, v.o_groups * v.o_lora_rank}, R::kSplitDim1, Component::kAttention, v.o_lora_rank);
  if (kind != V4Attention::kSliding) {
    const int64_t rate = kind == V4Attention::kCompressedSparse ? v.csa_rate : v.hca_rate;
    const int64_t coff = kind == V4Attention::kCompressedSparse ? 2 : 1;  // CSA: overlapping Ca / Cb series
    add("attn.compressor.wkv.weight", {coff * hd, d}, R::kReplicated, Component::kAttention);
    add("attn.compressor.wgate.weight", {coff * hd, d}, R::kReplicated, Component::kAttention);
    add("attn.compressor.ape", {rate, coff * hd}, R::kReplicated, Component::kAttention);
    add("attn.compressor.norm.weight", {hd}, R::kReplicated, Component::kNorm);
  }
  if (kind == V4Attention::kCompressedSparse) {
    const int64_t ihd = v.index_head_dim;
    add("attn.indexer.wq_b.weight", {v.index_n_heads * ihd, v.q_lora_rank}, R::kReplicated, Component::kAttention);
    add("attn.indexer.weights_proj.weight", {v.index_n_heads, d}, R::kReplicated, Component::kAttention);
    add("attn.indexer.compressor.wkv.weight", {2 * ihd, d}, R::kReplicated, Component::kAttention);
    add("attn.indexer.compressor.wgate.weight", {2 * ihd, d}, R::kReplicated, Component::kAttention);
    add("attn.indexer.compressor.ape", {v.csa_rate, 2 * ihd}, R::kReplicated, Component::kAttention);
    add("attn.indexer.compressor.norm.weight", {ihd}, R::kReplicated, Component::kNorm);
  }
  // FFN: router, the selection bias (learned routing) or the frozen token -> experts table
  // (hash routing), routed experts, one shared expert.
  add("ffn.gate.weight", {hp.n_expert, d}, R::kReplicated, Component::kRouter);
  if (hash) {
    add("ffn.gate.tid2eid", {hp.n_vocab, hp.n_expert_used}, R::kReplicated, Component::kRouter);
    s.back().index_range = hp.n_expert;
  } else add("ffn.gate.bias", {hp.n_expert}, R::kReplicated, Component::kRouter);
  const auto ne = static_cast<int>(hp.n_expert);
  for (int e = 0; e < ne; ++e) {
    const std::string ep = prefix + "ffn.experts." + std::to_string(e) + ".";
    for (const auto& [w, shape, dim] : {std::tuple{"w1", Shape{hp.n_ff_expert, d}, 0},
                                        std::tuple{"w3", Shape{hp.n_ff_expert, d}, 0},
                                        std::tuple{"w2", Shape{d, hp.n_ff_expert}, 1}}) {
      TensorSpec t{ep + w + ".weight", shape, R::kExpertOwned, layer};
      t.expert = e;
      t.n_expert = ne;
      t.expert_split_dim = dim;
      t.component = Component::kRoutedExpert;
      s.push_back(std::move(t));
    }
  }
  if (v.n_shared_experts > 0) {
    const int64_t ff = v.n_shared_experts * hp.n_ff_expert;
    add("ffn.shared_experts.w1.weight", {ff, d}, R::kSplitDim0, Component::kSharedExpert);
    add("ffn.shared_experts.w3.weight", {ff, d}, R::kSplitDim0, Component::kSharedExpert);
    add("ffn.shared_experts.w2.weight", {d, ff}, R::kSplitDim1, Component::kSharedExpert);
  }
}

std::vector<TensorSpec> DeepseekV4Adapter::tensor_specs(const HParams& hp) const {
  const DeepseekV4Params& v = hp.deepseek_v4();
  const int64_t d = hp.n_embd, hc = v.hc_mult;
  std::vector<TensorSpec> s = {
      {"embed.weight", {hp.n_vocab, d}, R::kVocabSplit, -1},
      {"norm.weight", {d}, R::kReplicated, -1},
      {"hc_head_fn", {hc, hc * d}, R::kReplicated, -1},
      {"hc_head_base", {hc}, R::kReplicated, -1},
      {"hc_head_scale", {1}, R::kReplicated, -1},
  };
  s[0].component = Component::kEmbedding;
  s[1].component = Component::kNorm;
  for (size_t i = 2; i < s.size(); ++i) s[i].component = Component::kLmHead;
  if (!hp.tie_embeddings) {
    s.push_back({"head.weight", {hp.n_vocab, d}, R::kVocabSplit, -1});
    s.back().component = Component::kLmHead;
  }
  for (int l = 0; l < hp.n_layer; ++l)
    block_specs(hp, "layers." + std::to_string(l) + ".", l, v.layer_types[l], v.hash_moe[l], s);
  // Multi-token prediction (mtp.{i}.*): a sliding-attention block with learned routing, the
  // embedding and hidden-state projections and their norms, its own mHC head; the main
  // model's embedding and head are shared. Declared, never loaded or run.
  for (int i = 0; i < hp.n_nextn_layer; ++i) {
    const int layer = static_cast<int>(hp.n_layer) + i;
    const std::string p = "mtp." + std::to_string(i) + ".";
    const size_t from = s.size();
    block_specs(hp, p, layer, V4Attention::kSliding, false, s);
    for (const char* n : {"e_proj.weight", "h_proj.weight"}) s.push_back({p + n, {d, d}, R::kReplicated, layer});
    for (const char* n : {"enorm.weight", "hnorm.weight", "norm.weight"}) {
      s.push_back({p + n, {d}, R::kReplicated, layer});
      s.back().component = Component::kNorm;
    }
    s.push_back({p + "hc_head_fn", {hc, hc * d}, R::kReplicated, layer});
    s.push_back({p + "hc_head_base", {hc}, R::kReplicated, layer});
    s.push_back({p + "hc_head_scale", {1}, R::kReplicated, layer});
    for (size_t i2 = from; i2 < s.size(); ++i2) {
      if (s[i2].component == Component::kUnknown) s[i2].component = Component::kMtpHead;
      s[i2].skip_load = true;
    }
  }
  if (hp.quant_block_rows > 0) {
    // FP8 Linears of the checkpoint: the attention's wq_a / wq_b / wkv / wo_a / wo_b, the
    // indexer's wq_b, the experts and the shared expert, MTP's projections; the compressors'
    // wkv / wgate, the indexer's weights_proj, the router, embedding and head stay bf16.
    const auto quantized = [](const std::string& n) {
      // transformers keeps only the compressors' wkv / wgate and the indexer's weights_proj in
      // bf16 (DeepseekV4PreTrainedModel._keep_in_fp32_modules); the indexer's wq_b is FP8.
      for (const char* suffix : {"attn.wq_a.weight", "attn.wq_b.weight", "indexer.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
                                 "attn.wo_b.weight", ".w1.weight", ".w2.weight", ".w3.weight", "e_proj.weight",
                                 "h_proj.weight"}) {
        const std::string x(suffix);
        if (n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0) return true;
      }
      return false;
    };
    std::vector<TensorSpec> scales;
    for (auto& t : s) {
      if (t.shape.size() != 2 || !quantized(t.name)) continue;
      if (v.fp4_experts && t.component == Component::kRoutedExpert) continue;  // FP4, below
      scales.push_back(attach_block_scale(t, t.name.substr(0, t.name.size() - 7) + ".scale", hp));  // X.weight -> X.scale
    }
    for (auto& t : scales) s.push_back(std::move(t));
  }
  if (v.fp4_experts) apply_in_place_fp4_experts(s);
  return s;
}

std::vector<LayerDesc> DeepseekV4Adapter::layer_kinds(const HParams& hp) const {
  const DeepseekV4Params& v = hp.deepseek_v4();
  std::vector<LayerDesc> out(static_cast<size_t>(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerDesc& d = out[l];
    const V4Attention k = v.layer_types[l];
    d.mixer = k == V4Attention::kSliding           ? MixerKind::kAttention
              : k == V4Attention::kCompressedSparse ? MixerKind::kCompressedSparse
                                                    : MixerKind::kHeavilyCompressed;
    LayerCache& c = d.cache;
    c.kv_heads = 1;
    c.head_dim = hp.head_dim;
    c.kv_shared = true;
    c.window = v.sliding_window;
    c.window_attended = true;  // v4_layer's state keeps the window's K=V entries
    const int64_t rate = v.compress_rate(l);
    if (rate > 0) {
      c.compress_rate = rate;
      c.compressed_kv_dim = hp.head_dim;
      const bool csa = k == V4Attention::kCompressedSparse;
      const int64_t coff = csa ? 2 : 1;
      // The window's tokens not yet compressed, with their gates, and (CSA) the previous
      // window's Ca slice with its gate; the indexer's compressor likewise at index_head_dim.
      c.pending_elements = (rate - 1) * 2 * coff * hp.head_dim + (csa ? 2 * hp.head_dim : 0);
      if (csa) {
        c.compressed_index_dim = v.index_head_dim;
        c.pending_elements += (rate - 1) * 2 * 2 * v.index_head_dim + 2 * v.index_head_dim;
      }
    }
    d.ffn.kind = FfnKind::kExperts;
    d.ffn.ff = hp.n_ff_expert;
    d.ffn.n_expert = hp.n_expert;
    d.ffn.n_used = hp.n_expert_used;
    d.ffn.shared_ff = v.n_shared_experts * hp.n_ff_expert;
  }
  return out;
}

// Generated models: 4 layers (sliding, CSA, HCA, CSA) with the first hash-routed, 4 heads of 64
// (16 rotary), one K=V head, an output group per 2 heads, CSA rate 4 with an 8-head indexer of 32 keeping
// 4 entries, HCA rate 8, window 8, 2 mHC streams with 20 Sinkhorn iterations, YaRN x4 on the
// compressed branches.
nlohmann::json DeepseekV4Adapter::make_config(const ModelShape& s) const {
  const int64_t hd = s.head_dim > 0 ? s.head_dim : 64;
  const int n = static_cast<int>(s.n_layer);
  nlohmann::json layer_types = nlohmann::json::array(), mlp_types = nlohmann::json::array();
  const char* cycle[] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                         "compressed_sparse_attention"};
  for (int l = 0; l < n; ++l) {
    layer_types.push_back(cycle[l % 4]);
    mlp_types.push_back(l == 0 ? "hash_moe" : "moe");
  }
  nlohmann::json c = {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"vocab_size", s.n_vocab},
      {"hidden_size", s.n_embd},
      {"num_hidden_layers", s.n_layer},
      {"num_attention_heads", s.n_head},
      {"num_key_value_heads", 1},
      {"head_dim", hd},
      {"partial_rotary_factor", 0.25},
      {"q_lora_rank", s.n_embd / 2},
      {"o_groups", std::max<int64_t>(1, s.n_head / 2)},
      {"o_lora_rank", s.n_embd / 2},
      {"hidden_act", "silu"},
      {"max_position_embeddings", s.max_position},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", s.rope_theta},
      {"compress_rope_theta", 160000.0},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 512},
                        {"beta_fast", 32.0}, {"beta_slow", 1.0}}},
      {"layer_types", layer_types},
      {"mlp_layer_types", mlp_types},
      {"compress_rates", {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 8}}},
      {"sliding_window", 8},
      {"index_n_heads", 8},
      {"index_head_dim", 32},
      {"index_topk", 4},
      {"hc_mult", 2},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"n_routed_experts", s.n_expert},
      {"num_experts_per_tok", s.n_expert_used},
      {"moe_intermediate_size", s.n_ff_expert},
      {"n_shared_experts", 1},
      {"scoring_func", "sqrtsoftplus"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5},
      {"swiglu_limit", 10.0},
      {"num_nextn_predict_layers", 1},
      {"tie_word_embeddings", s.tie_embeddings},
      {"torch_dtype", s.torch_dtype},
      {"use_cache", true},
      {"initializer_range", 0.02},
  };
  if (s.bos_id >= 0) c["bos_token_id"] = s.bos_id;
  if (s.eos_id >= 0) c["eos_token_id"] = s.eos_id;
  // The release's FP8 Linears with UE8M0 128x128 block scales (make-model --dtype fp8), and its
  // MXFP4 routed experts beside them (--dtype mxfp4).
  if (s.quant == "fp8" || s.quant == "mxfp4") {
    c["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}};
    if (s.quant == "mxfp4") c["quantization_config"]["expert_dtype"] = "fp4";
  }
  return c;
}

}  // namespace

const Adapter& deepseek_v4_adapter() {
  static const DeepseekV4Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
