// qwen3_next: Qwen3-Next-80B-A3B. A hybrid decoder: Gated DeltaNet layers (linear_attn.*:
// in_proj_qkvz / in_proj_ba grouped per key head, conv1d, A_log, dt_bias, gated norm, out_proj)
// and full-attention layers (self_attn.*: q_proj yielding per head [q | output gate], per-head
// q/k RMSNorm, rotary on the leading partial_rotary_factor of each head) as layer_types say (or
// every full_attention_interval-th layer); every RMSNorm but the gated one scales by (1 + w);
// MoE layers route softmax top-k over mlp.experts.{E} and add mlp.shared_expert scaled by
// sigmoid(mlp.shared_expert_gate . x). HF reference: transformers/models/qwen3_next.
#include "model/adapters/qwen3_next.h"

#include <cmath>

#include "backend/backend.h"
#include "core/json.h"
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/dense_decoder.h"
#include "model/blocks/norm.h"

namespace dayzero::model {

std::string Qwen3NextAdapter::layer_name(int layer, const std::string& rest) const {
  return "model.layers." + std::to_string(layer) + "." + rest;
}

blocks::AttentionNames Qwen3NextAdapter::attention_names(const HParams& hp, int layer) const {
  blocks::AttentionNames n;
  n.q = layer_name(layer, "self_attn.q_proj.weight");
  n.k = layer_name(layer, "self_attn.k_proj.weight");
  n.v = layer_name(layer, "self_attn.v_proj.weight");
  n.o = layer_name(layer, "self_attn.o_proj.weight");
  n.q_norm = layer_name(layer, "self_attn.q_norm.weight");
  n.k_norm = layer_name(layer, "self_attn.k_norm.weight");
  n.q_gate = hp.hybrid().attn_output_gate;
  return n;
}

blocks::MoeNames Qwen3NextAdapter::moe_names() const {
  const std::string p = layer_name(0, "");
  const std::string tmpl = p.substr(0, p.size() - 2) + "{L}.";  // "model.layers.{L}."
  return {tmpl + "mlp.gate.weight", tmpl + "mlp.experts.{E}.gate_proj.weight", tmpl + "mlp.experts.{E}.up_proj.weight",
          tmpl + "mlp.experts.{E}.down_proj.weight"};
}

blocks::MlpNames Qwen3NextAdapter::mlp_names(int layer, const char* part) const {
  blocks::MlpNames n;
  n.gate = layer_name(layer, std::string(part) + ".gate_proj.weight");
  n.up = layer_name(layer, std::string(part) + ".up_proj.weight");
  n.down = layer_name(layer, std::string(part) + ".down_proj.weight");
  return n;
}

blocks::GatedDeltaNetNames Qwen3NextAdapter::linear_names(int layer) const {
  blocks::GatedDeltaNetNames n;
  n.in_proj_qkvz = layer_name(layer, "linear_attn.in_proj_qkvz.weight");
  n.in_proj_ba = layer_name(layer, "linear_attn.in_proj_ba.weight");
  n.conv1d = layer_name(layer, "linear_attn.conv1d.weight");
  n.dt_bias = layer_name(layer, "linear_attn.dt_bias");
  n.a_log = layer_name(layer, "linear_attn.A_log");
  n.norm = layer_name(layer, "linear_attn.norm.weight");
  n.out_proj = layer_name(layer, "linear_attn.out_proj.weight");
  return n;
}

std::vector<LayerDesc> Qwen3NextAdapter::layer_kinds(const HParams& hp) const {
  std::vector<LayerDesc> out = Adapter::layer_kinds(hp);
  const HybridLinearParams& h = hp.hybrid();
  const LinearAttnParams& la = h.linear;
  for (int l = 0; l < static_cast<int>(out.size()); ++l) {
    LayerDesc& d = out[l];
    if (d.ffn.kind == FfnKind::kExperts) d.ffn.shared_ff = h.n_ff_shared_gated;
    if (!h.is_linear_layer(l)) continue;
    // Gated DeltaNet: no keys; per key-head group (split over tp as the weights are) the conv
    // window of its q, k and v channels and v_per_k recurrent states.
    d.mixer = MixerKind::kLinearAttention;
    d.cache = {};
    d.cache.state_heads = la.n_k_heads;
    d.cache.conv_rows = la.conv_kernel - 1;
    d.cache.conv_per_head = 2 * la.k_head_dim + la.v_per_k() * la.v_head_dim;
    d.cache.v_per_head = la.v_per_k();
    d.cache.k_dim = la.k_head_dim;
    d.cache.v_dim = la.v_head_dim;
  }
  return out;
}

Result<HParams> Qwen3NextAdapter::parse_hparams(const nlohmann::json& c) const {
  DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
  hp.family = family();
  hp.qk_norm = true;
  hp.norm_weight_offset = true;
  hp.family_params.emplace<HybridLinearParams>();
  DZ_ASSIGN_OR_RETURN(const bool bias, json_bool_or(c, "attention_bias", false));
  if (bias) return Status::Unsupported("config.json: qwen3_next attention_bias=true is not supported");
  DZ_ASSIGN_OR_RETURN(hp.hybrid().attn_output_gate, json_bool_or(c, "attn_output_gate", true));
  // Partial rotary: the top level or rope_parameters (transformers 5), default 0.25.
  double partial = 0.25;
  DZ_ASSIGN_OR_RETURN(partial, json_double_or(c, "partial_rotary_factor", partial));
  if (auto it = c.find("rope_parameters"); it != c.end() && it->is_object()) {
    DZ_ASSIGN_OR_RETURN(const double p, json_double_or(*it, "partial_rotary_factor", partial));
    partial = p;
  }
  const auto rope_dim = static_cast<int64_t>(static_cast<double>(hp.head_dim) * partial);
  if (!(partial > 0 && partial <= 1) || rope_dim < 2 || rope_dim % 2 != 0)
    return Status::InvalidArgument("config.json: partial_rotary_factor " + std::to_string(partial) +
                                   " does not give an even rotary width of head_dim " + std::to_string(hp.head_dim));
  hp.rope_dim = rope_dim;

  LinearAttnParams& la = hp.hybrid().linear;
  DZ_ASSIGN_OR_RETURN(la.n_k_heads, json_int(c, "linear_num_key_heads"));
  DZ_ASSIGN_OR_RETURN(la.n_v_heads, json_int(c, "linear_num_value_heads"));
  DZ_ASSIGN_OR_RETURN(la.k_head_dim, json_int(c, "linear_key_head_dim"));
  DZ_ASSIGN_OR_RETURN(la.v_head_dim, json_int(c, "linear_value_head_dim"));
  DZ_ASSIGN_OR_RETURN(la.conv_kernel, json_int(c, "linear_conv_kernel_dim"));
  if (la.n_v_heads % la.n_k_heads != 0)
    return Status::InvalidArgument("config.json: linear_num_value_heads (" + std::to_string(la.n_v_heads) +
                                   ") is not a multiple of linear_num_key_heads (" + std::to_string(la.n_k_heads) + ")");
  // Which layers are linear: layer_types when given, else every full_attention_interval-th is full.
  if (auto it = c.find("layer_types"); it != c.end() && !it->is_null()) {
    if (!it->is_array())
      return Status::InvalidArgument(std::string("config.json: key 'layer_types' must be a list, got ") + json_kind(*it));
    if (static_cast<int64_t>(it->size()) != hp.n_layer)
      return Status::InvalidArgument("config.json: layer_types lists " + std::to_string(it->size()) +
                                     " layers but num_hidden_layers is " + std::to_string(hp.n_layer));
    for (int l = 0; l < hp.n_layer; ++l) {
      const auto& t = (*it)[l];
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type == "linear_attention") hp.hybrid().linear_layers.push_back(l);
      else if (type != "full_attention")
        return Status::InvalidArgument("config.json: layer_types[" + std::to_string(l) + "] is '" + type +
                                       "', not linear_attention or full_attention");
    }
  } else {
    DZ_ASSIGN_OR_RETURN(const int64_t interval, json_int_or(c, "full_attention_interval", 4));
    if (interval <= 0) return Status::InvalidArgument("config.json: full_attention_interval must be positive");
    for (int l = 0; l < hp.n_layer; ++l)
      if ((l + 1) % interval != 0) hp.hybrid().linear_layers.push_back(l);
  }

  DZ_ASSIGN_OR_RETURN(hp.n_expert, json_int_or(c, "num_experts", 0));
  if (hp.n_expert > 0) {
    DZ_ASSIGN_OR_RETURN(hp.n_expert_used, json_int(c, "num_experts_per_tok"));
    DZ_ASSIGN_OR_RETURN(hp.n_ff_expert, json_int(c, "moe_intermediate_size"));
    DZ_ASSIGN_OR_RETURN(hp.hybrid().n_ff_shared_gated, json_int(c, "shared_expert_intermediate_size"));
    if (hp.n_expert_used > hp.n_expert)
      return Status::InvalidArgument("config.json: num_experts_per_tok exceeds num_experts");
  }
  DZ_ASSIGN_OR_RETURN(hp.norm_topk_prob, json_bool_or(c, "norm_topk_prob", true));
  DZ_ASSIGN_OR_RETURN(const int64_t step, json_int_or(c, "decoder_sparse_step", 1));
  DZ_ASSIGN_OR_RETURN(const std::vector<int64_t> mlp_only, json_int_list_or_empty(c, "mlp_only_layers"));
  for (int l = 0; l < hp.n_layer; ++l) {
    const bool sparse = hp.n_expert > 0 && std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() &&
                        step > 0 && (l + 1) % step == 0;
    if (!sparse) hp.dense_layers.push_back(l);
  }
  // Multi-token prediction layers (mtp.*): declared and checked, never run (transformers ignores them).
  DZ_ASSIGN_OR_RETURN(const int64_t nextn, json_int_or(c, "num_nextn_predict_layers", 0));
  DZ_ASSIGN_OR_RETURN(hp.n_nextn_layer, json_int_or(c, "mtp_num_hidden_layers", nextn));
  if (hp.n_nextn_layer < 0) return Status::InvalidArgument("config.json: key 'mtp_num_hidden_layers' must be >= 0");
  return hp;
}

std::vector<TensorSpec> Qwen3NextAdapter::tensor_specs(const HParams& hp) const {
  const int64_t d = hp.n_embd, hd = hp.head_dim;
  using R = ShardRule;
  using C = Component;
  std::vector<TensorSpec> s = {{embed_name(), {hp.n_vocab, d}, R::kVocabSplit, -1},
                               {final_norm_name(), {d}, R::kReplicated, -1}};
  s[0].component = C::kEmbedding;
  s[1].component = C::kNorm;
  if (!hp.tie_embeddings) {
    s.push_back({lm_head_name(hp), {hp.n_vocab, d}, R::kVocabSplit, -1});
    s.back().component = C::kLmHead;
  }
  // Decoder layers, then the multi-token-prediction layers (full attention + MoE, as layer
  // n_layer + i under mtp.layers.{i}.*), declared for the checkpoint check and never loaded.
  const int n_total = static_cast<int>(hp.n_layer + hp.n_nextn_layer);
  for (int l = 0; l < n_total; ++l) {
    const size_t layer_from = s.size();
    size_t from = s.size();
    s.push_back({layer_name(l, "input_layernorm.weight"), {d}, R::kReplicated, l});
    s.push_back({layer_name(l, "post_attention_layernorm.weight"), {d}, R::kReplicated, l});
    set_component(s, from, C::kNorm);
    if (hp.hybrid().is_linear_layer(l)) {
      for (auto& t : blocks::gated_deltanet_specs(hp, l, linear_names(l))) s.push_back(std::move(t));
    } else {
      const blocks::AttentionNames a = attention_names(hp, l);
      const int64_t q_rows = hp.n_head * hd * (hp.hybrid().attn_output_gate ? 2 : 1);
      from = s.size();
      s.push_back({a.q, {q_rows, d}, R::kSplitDim0, l, hp.hybrid().attn_output_gate ? 2 * hd : hd});
      s.push_back({a.k, {hp.n_head_kv * hd, d}, R::kSplitDim0, l, hd});
      s.push_back({a.v, {hp.n_head_kv * hd, d}, R::kSplitDim0, l, hd});
      s.push_back({a.o, {d, hp.n_head * hd}, R::kSplitDim1, l, hd});
      set_component(s, from, C::kAttention);
      from = s.size();
      s.push_back({a.q_norm, {hd}, R::kReplicated, l});
      s.push_back({a.k_norm, {hd}, R::kReplicated, l});
      set_component(s, from, C::kNorm);
    }
    if (hp.is_moe_layer(l)) {
      for (auto& t : blocks::moe_specs(hp, l, moe_names())) s.push_back(std::move(t));
      const blocks::MlpNames sh = mlp_names(l, "mlp.shared_expert");
      from = s.size();
      s.push_back({sh.gate, {hp.hybrid().n_ff_shared_gated, d}, R::kSplitDim0, l});
      s.push_back({sh.up, {hp.hybrid().n_ff_shared_gated, d}, R::kSplitDim0, l});
      s.push_back({sh.down, {d, hp.hybrid().n_ff_shared_gated}, R::kSplitDim1, l});
      s.push_back({layer_name(l, "mlp.shared_expert_gate.weight"), {1, d}, R::kReplicated, l});
      set_component(s, from, C::kSharedExpert);
    } else {
      const blocks::MlpNames m = mlp_names(l, "mlp");
      from = s.size();
      s.push_back({m.gate, {hp.n_ff, d}, R::kSplitDim0, l});
      s.push_back({m.up, {hp.n_ff, d}, R::kSplitDim0, l});
      s.push_back({m.down, {d, hp.n_ff}, R::kSplitDim1, l});
      set_component(s, from, C::kMlp);
    }
    if (l >= hp.n_layer) {
      const std::string prefix = layer_name(l, ""), mtp = "mtp.layers." + std::to_string(l - hp.n_layer) + ".";
      for (size_t i = layer_from; i < s.size(); ++i) {
        s[i].name = mtp + s[i].name.substr(prefix.size());
        s[i].skip_load = true;
      }
    }
  }
  if (hp.n_nextn_layer > 0) {
    const int l = static_cast<int>(hp.n_layer);
    const size_t from = s.size();
    s.push_back({"mtp.fc.weight", {d, 2 * d}, R::kReplicated, l});
    s.push_back({"mtp.pre_fc_norm_embedding.weight", {d}, R::kReplicated, l});
    s.push_back({"mtp.pre_fc_norm_hidden.weight", {d}, R::kReplicated, l});
    s.push_back({"mtp.norm.weight", {d}, R::kReplicated, l});
    set_component(s, from, C::kMtpHead);
    for (size_t i = from; i < s.size(); ++i) s[i].skip_load = true;
  }
  return s;
}

Tensor Qwen3NextAdapter::ffn(LayerContext& ctx, int layer, const Tensor& x) const {
  if (!ctx.hp.is_moe_layer(layer)) return blocks::swiglu_mlp(ctx, mlp_names(layer, "mlp"), x);
  backend::Backend& be = ctx.be;
  const int64_t n = x.dim(0);
  Tensor out = blocks::moe_ffn(ctx, layer, moe_names(), x);
  Tensor shared = blocks::swiglu_mlp(ctx, mlp_names(layer, "mlp.shared_expert"), x);
  // The shared expert's per-token gate sigmoid(x . w_gate) on the host.
  Tensor gate = be.empty(DType::kF32, {n, 1});
  be.matmul(x, ctx.w.get(layer_name(layer, "mlp.shared_expert_gate.weight")), gate);
  Tensor gate_h = Tensor::host(DType::kF32, {n, 1}), shared_h = Tensor::host(DType::kF32, shared.shape());
  be.to_host(gate, gate_h);
  be.to_host(shared, shared_h);
  const int64_t d = shared.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    const auto s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(gate_h.f32()[t]))));
    for (int64_t c = 0; c < d; ++c) shared_h.f32()[t * d + c] *= s;
  }
  be.add(be.to_device(shared_h), out);
  return out;
}

void Qwen3NextAdapter::forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const {
  backend::Backend& be = ctx.be;
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  Tensor x = be.empty(DType::kF32, hidden.shape());
  blocks::rms_norm(be, ctx.hp, hidden, ctx.w.get(layer_name(layer, "input_layernorm.weight")), x);
  emit(ctx.sink, prefix + "attn_norm", x);
  Tensor mix = ctx.hp.hybrid().is_linear_layer(layer) ? blocks::gated_deltanet(ctx, linear_names(layer), x)
                                             : blocks::attention(ctx, attention_names(ctx.hp, layer), x);
  emit(ctx.sink, prefix + "attn_out", mix);
  be.add(mix, hidden);
  blocks::rms_norm(be, ctx.hp, hidden, ctx.w.get(layer_name(layer, "post_attention_layernorm.weight")), x);
  emit(ctx.sink, prefix + "ffn_norm", x);
  Tensor f = ffn(ctx, layer, x);
  emit(ctx.sink, prefix + "ffn_out", f);
  be.add(f, hidden);
  emit(ctx.sink, prefix + "layer_out", hidden);
}

void Qwen3NextAdapter::fill_tiny_defaults(ModelShape& s) const {
  if (s.n_expert == 0) s.n_expert = 8;
  if (s.n_expert_used == 0) s.n_expert_used = 2;
  if (s.n_ff_expert == 0) s.n_ff_expert = std::max<int64_t>(1, s.n_ff / 4);
}

// Generated models: every second layer full attention (so a 4-layer model has two of each and
// any pp2 stage holds both kinds); 2 key heads of 4 value heads x 16 in the linear layers
// (Qwen3-Next's 1:2 ratio); a quarter of each attention head rotated.
nlohmann::json Qwen3NextAdapter::make_config(const ModelShape& s) const {
  nlohmann::json c = llama_like_config(s, "qwen3_next", "Qwen3NextForCausalLM");
  c["rms_norm_eps"] = 1e-6;
  c["attention_bias"] = false;
  c["partial_rotary_factor"] = 0.25;
  c["full_attention_interval"] = 2;
  c["linear_num_key_heads"] = 2;
  c["linear_num_value_heads"] = 4;
  c["linear_key_head_dim"] = 16;
  c["linear_value_head_dim"] = 16;
  c["linear_conv_kernel_dim"] = 4;
  c["num_experts"] = s.n_expert;
  c["num_experts_per_tok"] = s.n_expert_used;
  c["moe_intermediate_size"] = s.n_ff_expert;
  c["shared_expert_intermediate_size"] = s.n_ff_expert * 2;
  c["norm_topk_prob"] = true;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = nlohmann::json::array();
  c["router_aux_loss_coef"] = 0.001;
  c["output_router_logits"] = false;
  return c;
}

const Adapter& qwen3_next_adapter() {
  static const Qwen3NextAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
