// qwen3: Qwen3 dense models: Llama layout, explicit head_dim, and a per-head RMSNorm of
// q and k (q_norm, k_norm [head_dim]) applied before RoPE; optional attention biases.
// HF reference: transformers/models/qwen3.
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"

namespace dayzero::model {
namespace {

class Qwen3Adapter final : public LlamaLikeAdapter {
 public:
  const char* family() const override { return "qwen3"; }
  std::vector<std::string> architectures() const override { return {"Qwen3ForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    DZ_ASSIGN_OR_RETURN(const bool sliding, json_bool_or(c, "use_sliding_window", false));
    if (sliding)
      return Status::Unsupported("config.json: qwen3 use_sliding_window=true is not supported");
    hp.family = family();
    hp.qk_norm = true;
    DZ_ASSIGN_OR_RETURN(hp.attn_qkv_bias, json_bool_or(c, "attention_bias", false));
    hp.attn_out_bias = hp.attn_qkv_bias;
    return hp;
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "qwen3", "Qwen3ForCausalLM");
    c["attention_bias"] = false;
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = s.n_layer;
    return c;
  }
};

}  // namespace

const Adapter& qwen3_adapter() {
  static const Qwen3Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
