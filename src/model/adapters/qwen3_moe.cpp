// qwen3_moe: Qwen3-30B-A3B / Qwen3-235B-A22B: Qwen3 attention (q/k RMSNorm, explicit head_dim)
// and softmax-routed experts (mlp.gate = router, mlp.experts.{E}.gate/up/down_proj of
// moe_intermediate_size), top-k renormalised when norm_topk_prob; layers listed in
// mlp_only_layers or off the decoder_sparse_step grid keep a dense MLP of intermediate_size.
// HF reference: transformers/models/qwen3_moe.
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/moe.h"

namespace dayzero::model {
namespace {

const blocks::MoeNames kQwen3Moe = {"model.layers.{L}.mlp.gate.weight", "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
                               "model.layers.{L}.mlp.experts.{E}.up_proj.weight",
                               "model.layers.{L}.mlp.experts.{E}.down_proj.weight"};

class Qwen3MoeAdapter final : public Adapter {
 public:
  const char* family() const override { return "qwen3_moe"; }
  std::vector<std::string> architectures() const override { return {"Qwen3MoeForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    DZ_ASSIGN_OR_RETURN(const bool sliding, json_bool_or(c, "use_sliding_window", false));
    if (sliding)
      return Status::Unsupported("config.json: qwen3_moe use_sliding_window=true is not supported");
    hp.family = family();
    hp.qk_norm = true;
    DZ_ASSIGN_OR_RETURN(hp.attn_qkv_bias, json_bool_or(c, "attention_bias", false));
    hp.attn_out_bias = hp.attn_qkv_bias;
    DZ_ASSIGN_OR_RETURN(hp.n_expert, json_int(c, "num_experts"));
    DZ_ASSIGN_OR_RETURN(hp.n_expert_used, json_int(c, "num_experts_per_tok"));
    DZ_ASSIGN_OR_RETURN(hp.n_ff_expert, json_int(c, "moe_intermediate_size"));
    if (hp.n_expert_used > hp.n_expert)
      return Status::InvalidArgument("config.json: num_experts_per_tok exceeds num_experts");
    DZ_ASSIGN_OR_RETURN(hp.norm_topk_prob, json_bool_or(c, "norm_topk_prob", false));
    DZ_ASSIGN_OR_RETURN(const int64_t step, json_int_or(c, "decoder_sparse_step", 1));
    DZ_ASSIGN_OR_RETURN(const std::vector<int64_t> mlp_only, json_int_list_or_empty(c, "mlp_only_layers"));
    for (int l = 0; l < hp.n_layer; ++l) {
      const bool sparse = std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && step > 0 &&
                          (l + 1) % step == 0;
      if (!sparse) hp.dense_layers.push_back(l);
    }
    return hp;
  }

  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = blocks::dense_model_specs(hp);
    for (int l = 0; l < hp.n_layer; ++l) {
      const bool moe = hp.is_moe_layer(l);
      for (auto& t : blocks::dense_decoder_specs(hp, l, !moe)) s.push_back(std::move(t));
      if (moe)
        for (auto& t : blocks::moe_specs(hp, l, kQwen3Moe)) s.push_back(std::move(t));
    }
    return s;
  }

  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override {
    if (!ctx.hp.is_moe_layer(layer)) return blocks::dense_decoder_layer(ctx, layer, hidden);
    blocks::dense_decoder_layer(ctx, layer, hidden, [](LayerContext& c, int l, const Tensor& x) {
      return blocks::moe_ffn(c, l, kQwen3Moe, x);
    });
  }

  void fill_tiny_defaults(ModelShape& s) const override {
    if (s.n_expert == 0) s.n_expert = 8;
    if (s.n_expert_used == 0) s.n_expert_used = 2;
    if (s.n_ff_expert == 0) s.n_ff_expert = std::max<int64_t>(1, s.n_ff / 2);
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "qwen3_moe", "Qwen3MoeForCausalLM");
    c["attention_bias"] = false;
    c["num_experts"] = s.n_expert;
    c["num_experts_per_tok"] = s.n_expert_used;
    c["moe_intermediate_size"] = s.n_ff_expert;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
    c["router_aux_loss_coef"] = 0.001;
    c["output_router_logits"] = false;
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = s.n_layer;
    return c;
  }
};

}  // namespace

const Adapter& qwen3_moe_adapter() {
  static const Qwen3MoeAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
