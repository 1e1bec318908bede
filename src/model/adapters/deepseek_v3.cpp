// deepseek_v3: DeepSeek-V3 / R1 and Kimi-K2 (model_type kimi_k2, same architecture): MLA
// attention (blocks/mla), a dense SwiGLU MLP in the first first_k_dense_replace layers and
// sigmoid group-routed experts plus shared experts after (blocks/moe_sigmoid), YaRN RoPE.
// FP8 checkpoints (quantization_config fp8, 128x128 blocks) carry X.weight_scale_inv for
// every quantized Linear: the loader dequantizes to f32. Multi-token-prediction layers
// (num_nextn_predict_layers, model.layers.{n_layer}.*) are declared and never loaded.
// HF reference: transformers/models/deepseek_v3.
#include <cmath>

#include "checkpoint/fp4.h"
#include "checkpoint/fp8.h"
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/adapters/deepseek_v3.h"
#include "model/blocks/mla.h"
#include "model/blocks/moe_sigmoid.h"
#include "backend/backend.h"

namespace dayzero::model {
namespace {

std::string L(const char* tmpl, int layer) { return layer_tensor_name(tmpl, layer); }

blocks::GroupMoeNames moe_names(int layer) {
  blocks::GroupMoeNames n;
  n.moe = {"model.layers.{L}.mlp.gate.weight", "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
           "model.layers.{L}.mlp.experts.{E}.up_proj.weight", "model.layers.{L}.mlp.experts.{E}.down_proj.weight"};
  n.bias = "model.layers.{L}.mlp.gate.e_score_correction_bias";
  n.shared.gate = L("model.layers.{L}.mlp.shared_experts.gate_proj.weight", layer);
  n.shared.up = L("model.layers.{L}.mlp.shared_experts.up_proj.weight", layer);
  n.shared.down = L("model.layers.{L}.mlp.shared_experts.down_proj.weight", layer);
  return n;
}

blocks::MlpNames mlp_names(int layer) {
  blocks::MlpNames n;
  n.gate = L("model.layers.{L}.mlp.gate_proj.weight", layer);
  n.up = L("model.layers.{L}.mlp.up_proj.weight", layer);
  n.down = L("model.layers.{L}.mlp.down_proj.weight", layer);
  return n;
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

}  // namespace

Result<HParams> DeepseekV3Adapter::parse_hparams(const nlohmann::json& c) const {
  DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
  hp.family = family();
  DZ_ASSIGN_OR_RETURN(const bool attention_bias, json_bool_or(c, "attention_bias", false));
  if (attention_bias)
    return Status::Unsupported("config.json: deepseek_v3 attention_bias=true is not supported");
  DeepSeekParams& ds = hp.family_params.emplace<DeepSeekParams>();
  MlaParams& m = ds.mla;
  DZ_ASSIGN_OR_RETURN(m.q_lora_rank, json_int_or(c, "q_lora_rank", 0));  // null: a plain q_proj
  if (m.q_lora_rank < 0) return Status::InvalidArgument("config.json: key 'q_lora_rank' must be >= 0");
  DZ_ASSIGN_OR_RETURN(m.kv_lora_rank, json_int(c, "kv_lora_rank"));
  DZ_ASSIGN_OR_RETURN(m.qk_nope_head_dim, json_int(c, "qk_nope_head_dim"));
  DZ_ASSIGN_OR_RETURN(m.qk_rope_head_dim, json_int(c, "qk_rope_head_dim"));
  DZ_ASSIGN_OR_RETURN(m.v_head_dim, json_int(c, "v_head_dim"));
  DZ_ASSIGN_OR_RETURN(m.rope_interleave, json_bool_or(c, "rope_interleave", true));
  if (m.qk_rope_head_dim % 2 != 0) return Status::InvalidArgument("config.json: qk_rope_head_dim must be even");
  double scale = 1.0 / std::sqrt(static_cast<double>(m.qk_head_dim()));
  const RopeScaling& rs = hp.rope_scaling;
  if (rs.type != "default" && rs.mscale_all_dim != 0) {
    const double ms = yarn_get_mscale(rs.factor, rs.mscale_all_dim);
    scale *= ms * ms;
  }
  m.softmax_scale = scale;
  // The cache holds every head's expanded k and v, padded to one head size (blocks/mla.h).
  hp.n_head_kv = hp.n_head;
  hp.head_dim = std::max(m.qk_head_dim(), m.v_head_dim);
  hp.rope_dim = m.qk_rope_head_dim;

  DZ_ASSIGN_OR_RETURN(hp.n_expert, json_int(c, "n_routed_experts"));
  DZ_ASSIGN_OR_RETURN(hp.n_expert_used, json_int(c, "num_experts_per_tok"));
  DZ_ASSIGN_OR_RETURN(hp.n_ff_expert, json_int(c, "moe_intermediate_size"));
  DZ_ASSIGN_OR_RETURN(hp.norm_topk_prob, json_bool_or(c, "norm_topk_prob", true));
  GroupRouting& g = ds.routing;
  DZ_ASSIGN_OR_RETURN(g.n_group, json_int_or(c, "n_group", 1));
  DZ_ASSIGN_OR_RETURN(g.topk_group, json_int_or(c, "topk_group", 1));
  DZ_ASSIGN_OR_RETURN(g.routed_scaling_factor, json_double_or(c, "routed_scaling_factor", 1.0));
  DZ_ASSIGN_OR_RETURN(g.n_shared_experts, json_int_or(c, "n_shared_experts", 0));
  if (g.n_shared_experts < 0) return Status::InvalidArgument("config.json: key 'n_shared_experts' must be >= 0");
  DZ_ASSIGN_OR_RETURN(const std::string scoring, json_string_or(c, "scoring_func", "sigmoid"));
  if (scoring != "sigmoid")
    return Status::Unsupported("config.json: deepseek_v3 scoring_func '" + scoring + "' is not supported");
  if (hp.n_expert_used > hp.n_expert)
    return Status::InvalidArgument("config.json: num_experts_per_tok exceeds n_routed_experts");
  if (g.n_group < 1 || hp.n_expert % g.n_group != 0 || g.topk_group < 1 || g.topk_group > g.n_group)
    return Status::InvalidArgument("config.json: n_routed_experts " + std::to_string(hp.n_expert) +
                                   " in n_group " + std::to_string(g.n_group) + " with topk_group " +
                                   std::to_string(g.topk_group) + " is not a valid grouping");
  if (hp.n_expert_used > g.topk_group * (hp.n_expert / g.n_group))
    return Status::InvalidArgument("config.json: num_experts_per_tok exceeds the experts of topk_group groups");
  DZ_ASSIGN_OR_RETURN(const int64_t first_k_dense, json_int_or(c, "first_k_dense_replace", 0));
  const int64_t first_dense = std::min<int64_t>(first_k_dense, hp.n_layer);
  for (int l = 0; l < first_dense; ++l) hp.dense_layers.push_back(l);
  DZ_ASSIGN_OR_RETURN(hp.n_nextn_layer, json_int_or(c, "num_nextn_predict_layers", 0));
  if (hp.n_nextn_layer < 0) return Status::InvalidArgument("config.json: key 'num_nextn_predict_layers' must be >= 0");
  // An FP4 quantization_config (compressed-tensors) is the model folder's (model/fp4_specs.h).
  Result<std::optional<checkpoint::BlockQuant>> quant = std::optional<checkpoint::BlockQuant>{};
  if (!checkpoint::is_fp4_quant_config(c)) quant = checkpoint::parse_block_quant(c);
  if (!quant.ok()) return quant.status();
  if (*quant) {
    hp.quant_block_rows = (*quant)->block_rows;
    hp.quant_block_cols = (*quant)->block_cols;
  }
  return hp;
}

std::vector<LayerDesc> DeepseekV3Adapter::layer_kinds(const HParams& hp) const {
  std::vector<LayerDesc> out = Adapter::layer_kinds(hp);
  const int64_t shared_ff = hp.deepseek().routing.n_shared_experts * hp.n_ff_expert;
  for (auto& d : out) {
    d.mixer = MixerKind::kMla;  // caches the expanded k and v of every head (n_head_kv = n_head)
    if (d.ffn.kind == FfnKind::kExperts) d.ffn.shared_ff = shared_ff;
  }
  return out;
}

std::vector<TensorSpec> DeepseekV3Adapter::attention_specs(const HParams& hp, int layer) const {
return blocks::mla_specs(hp, layer);
}

Tensor DeepseekV3Adapter::attention(LayerContext& ctx, int layer, const Tensor& x) const {
return blocks::mla_attention(ctx, blocks::mla_names(ctx.hp, layer), x);
}

std::vector<TensorSpec> DeepseekV3Adapter::tensor_specs(const HParams& hp) const {
  std::vector<TensorSpec> s = blocks::dense_model_specs(hp);
  const int64_t d = hp.n_embd;
  const auto n_total = static_cast<int>(hp.n_layer + hp.n_nextn_layer);
  for (int l = 0; l < n_total; ++l) {
    const size_t first = s.size();
    s.push_back({L("model.layers.{L}.input_layernorm.weight", l), {d}, ShardRule::kReplicated, l});
    s.push_back({L("model.layers.{L}.post_attention_layernorm.weight", l), {d}, ShardRule::kReplicated, l});
    set_component(s, first, Component::kNorm);
    for (auto& t : attention_specs(hp, l)) s.push_back(std::move(t));
    if (l < hp.n_layer && !hp.is_moe_layer(l)) {
      const blocks::MlpNames m = mlp_names(l);
      s.push_back({m.gate, {hp.n_ff, d}, ShardRule::kSplitDim0, l});
      s.push_back({m.up, {hp.n_ff, d}, ShardRule::kSplitDim0, l});
      s.push_back({m.down, {d, hp.n_ff}, ShardRule::kSplitDim1, l});
      set_component(s, s.size() - 3, Component::kMlp);
    } else {
      for (auto& t : blocks::group_moe_specs(hp, l, moe_names(l))) s.push_back(std::move(t));
    }
    if (l >= hp.n_layer) {
      // Multi-token prediction (DeepSeek-V3 modeling: enorm/hnorm/eh_proj/shared_head).
      using R = ShardRule;
      const size_t mtp_from = s.size();
      s.push_back({L("model.layers.{L}.enorm.weight", l), {d}, R::kReplicated, l});
      s.push_back({L("model.layers.{L}.hnorm.weight", l), {d}, R::kReplicated, l});
      s.push_back({L("model.layers.{L}.eh_proj.weight", l), {d, 2 * d}, R::kReplicated, l});
      s.push_back({L("model.layers.{L}.embed_tokens.weight", l), {hp.n_vocab, d}, R::kReplicated, l});
      s.push_back({L("model.layers.{L}.shared_head.norm.weight", l), {d}, R::kReplicated, l});
      s.push_back({L("model.layers.{L}.shared_head.head.weight", l), {hp.n_vocab, d}, R::kReplicated, l});
      set_component(s, mtp_from, Component::kMtpHead);
      for (size_t i = mtp_from; i < s.size(); ++i)
        if (s[i].shape.size() == 1) s[i].component = Component::kNorm;
      for (size_t i = first; i < s.size(); ++i) s[i].skip_load = true;
    }
  }
  if (hp.quant_block_rows > 0) {
    // Every Linear of the decoder layers is block-quantized; the router, norms, embedding
    // and lm_head (and MTP's eh_proj) stay in bf16.
    std::vector<TensorSpec> scales;
    for (auto& t : s) {
      if (t.layer < 0 || t.shape.size() != 2 || ends_with(t.name, "eh_proj.weight")) continue;
      if (!ends_with(t.name, "proj.weight") && !ends_with(t.name, "proj_with_mqa.weight") &&
          !ends_with(t.name, "indexer.wq_b.weight") && !ends_with(t.name, "indexer.wk.weight"))
        continue;
      if (ends_with(t.name, "indexer.weights_proj.weight")) continue;  // kept in bf16
      scales.push_back(attach_block_scale(t, t.name + "_scale_inv", hp));
    }
    for (auto& t : scales) s.push_back(std::move(t));
  }
  return s;
}

void DeepseekV3Adapter::forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const {
  auto& be = ctx.be;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  const float eps = static_cast<float>(ctx.hp.rms_eps);
  Tensor x = be.empty(DType::kF32, hidden.shape());
  be.rmsnorm(hidden, ctx.w.get(L("model.layers.{L}.input_layernorm.weight", layer)), eps, x);
  emit(ctx.sink, prefix + "attn_norm", x);
  Tensor attn = attention(ctx, layer, x);
  emit(ctx.sink, prefix + "attn_out", attn);
  be.add_rmsnorm(attn, hidden, ctx.w.get(L("model.layers.{L}.post_attention_layernorm.weight", layer)), eps, x);
  emit(ctx.sink, prefix + "ffn_norm", x);
  Tensor ffn = ctx.hp.is_moe_layer(layer) ? blocks::group_moe_ffn(ctx, layer, moe_names(layer), x)
                                          : blocks::swiglu_mlp(ctx, mlp_names(layer), x);
  emit(ctx.sink, prefix + "ffn_out", ffn);
  be.add(ffn, hidden);
  emit(ctx.sink, prefix + "layer_out", hidden);
}

// Generated models: head_dim sets qk_nope_head_dim and v_head_dim (default 16), rope dims 8,
// both lora ranks n_embd / 2, groups of 2 experts with half the groups kept, one shared
// expert, the first layer dense, YaRN x4 over an original 512 positions.
void DeepseekV3Adapter::fill_tiny_defaults(ModelShape& s) const {
  if (s.n_expert == 0) s.n_expert = 8;
  if (s.n_expert_used == 0) s.n_expert_used = 2;
  if (s.n_ff_expert == 0) s.n_ff_expert = std::max<int64_t>(1, s.n_ff / 2);
}

nlohmann::json DeepseekV3Adapter::make_config(const ModelShape& s) const {
  nlohmann::json c = llama_like_config(s, "deepseek_v3", "DeepseekV3ForCausalLM");
  c.erase("head_dim");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : 16;
  c["num_key_value_heads"] = s.n_head;
  c["attention_bias"] = false;
  c["q_lora_rank"] = s.n_embd / 2;
  c["kv_lora_rank"] = s.n_embd / 2;
  c["qk_nope_head_dim"] = hd;
  c["qk_rope_head_dim"] = 8;
  c["v_head_dim"] = hd;
  c["rope_interleave"] = true;
  c["n_routed_experts"] = s.n_expert;
  c["num_experts_per_tok"] = s.n_expert_used;
  c["moe_intermediate_size"] = s.n_ff_expert;
  c["n_shared_experts"] = 1;
  const int64_t n_group = s.n_expert % 2 == 0 ? s.n_expert / 2 : 1;
  c["n_group"] = n_group;
  c["topk_group"] = std::max<int64_t>(1, n_group / 2);
  c["routed_scaling_factor"] = 2.5;
  c["norm_topk_prob"] = true;
  c["scoring_func"] = "sigmoid";
  c["topk_method"] = "noaux_tc";
  c["first_k_dense_replace"] = 1;
  c["moe_layer_freq"] = 1;
  c["num_nextn_predict_layers"] = 0;
  c["rope_scaling"] = {{"type", "yarn"},          {"factor", 4.0},      {"original_max_position_embeddings", 512},
                       {"beta_fast", 32.0},        {"beta_slow", 1.0},   {"mscale", 0.9},
                       {"mscale_all_dim", 1.0}};
  return c;
}

const Adapter& deepseek_v3_adapter() {
  static const DeepseekV3Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
