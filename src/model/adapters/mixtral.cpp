// mixtral: Mixtral 8x7B / 8x22B (and WizardLM-2-8x22B): Llama attention with GQA, every layer's
// FFN a softmax-routed mixture of SwiGLU experts (block_sparse_moe: gate = router, experts
// w1 = gate, w3 = up, w2 = down), top-k renormalised. HF reference: transformers/models/mixtral.
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/moe.h"

namespace dayzero::model {
namespace {

const blocks::MoeNames kMixtralMoe = {"model.layers.{L}.block_sparse_moe.gate.weight",
                               "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight",
                               "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight",
                               "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight"};

class MixtralAdapter final : public Adapter {
 public:
  const char* family() const override { return "mixtral"; }
  std::vector<std::string> architectures() const override { return {"MixtralForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    hp.family = family();
    DZ_ASSIGN_OR_RETURN(hp.n_expert, json_int(c, "num_local_experts"));
    DZ_ASSIGN_OR_RETURN(hp.n_expert_used, json_int(c, "num_experts_per_tok"));
    if (hp.n_expert_used > hp.n_expert)
      return Status::InvalidArgument("config.json: num_experts_per_tok exceeds num_local_experts");
    hp.n_ff_expert = hp.n_ff;
    hp.norm_topk_prob = true;
    return hp;
  }

  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = blocks::dense_model_specs(hp);
    for (int l = 0; l < hp.n_layer; ++l) {
      for (auto& t : blocks::dense_decoder_specs(hp, l, false)) s.push_back(std::move(t));
      for (auto& t : blocks::moe_specs(hp, l, kMixtralMoe)) s.push_back(std::move(t));
    }
    return s;
  }

  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override {
    blocks::dense_decoder_layer(ctx, layer, hidden, [](LayerContext& c, int l, const Tensor& x) {
      return blocks::moe_ffn(c, l, kMixtralMoe, x);
    });
  }

  // Experts use n_ff (mixtral has no separate expert size).
  void fill_tiny_defaults(ModelShape& s) const override {
    if (s.n_expert == 0) s.n_expert = 4;
    if (s.n_expert_used == 0) s.n_expert_used = 2;
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "mixtral", "MixtralForCausalLM");
    c["num_local_experts"] = s.n_expert;
    c["num_experts_per_tok"] = s.n_expert_used;
    c["router_aux_loss_coef"] = 0.02;
    c["output_router_logits"] = false;
    c["sliding_window"] = nullptr;
    return c;
  }
};

}  // namespace

const Adapter& mixtral_adapter() {
  static const MixtralAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
