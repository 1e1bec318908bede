// qwen2: Qwen2 / Qwen2.5 dense models: Llama layout plus biases on q/k/v (not on o).
// HF reference: transformers/models/qwen2. Sliding-window attention is not used by these
// checkpoints at the lengths dayzero runs (use_sliding_window false) and is rejected if on.
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"

namespace dayzero::model {
namespace {

class Qwen2Adapter final : public LlamaLikeAdapter {
 public:
  const char* family() const override { return "qwen2"; }
  std::vector<std::string> architectures() const override { return {"Qwen2ForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    DZ_ASSIGN_OR_RETURN(const bool sliding, json_bool_or(c, "use_sliding_window", false));
    if (sliding)
      return Status::Unsupported("config.json: qwen2 use_sliding_window=true is not supported");
    hp.family = family();
    hp.attn_qkv_bias = true;
    return hp;
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "qwen2", "Qwen2ForCausalLM");
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = s.n_layer;
    return c;
  }
};

}  // namespace

const Adapter& qwen2_adapter() {
  static const Qwen2Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
