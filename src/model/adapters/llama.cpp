// llama: Meta Llama 1-3.x (GQA, RoPE with the llama3 frequency scaling, optional tied
// embeddings, optional attention/MLP biases). HF reference: transformers/models/llama.
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"

namespace dayzero::model {
namespace {

class LlamaAdapter final : public LlamaLikeAdapter {
 public:
  const char* family() const override { return "llama"; }
  std::vector<std::string> architectures() const override { return {"LlamaForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    hp.family = family();
    DZ_ASSIGN_OR_RETURN(hp.attn_qkv_bias, json_bool_or(c, "attention_bias", false));
    hp.attn_out_bias = hp.attn_qkv_bias;
    DZ_ASSIGN_OR_RETURN(hp.mlp_bias, json_bool_or(c, "mlp_bias", false));
    return hp;
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "llama", "LlamaForCausalLM");
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
    return c;
  }
};

}  // namespace

const Adapter& llama_adapter() {
  static const LlamaAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
