// mistral: Mistral 7B and its dense successors (Mistral-Nemo, Mistral Small): the Llama layout
// without biases, an optional head_dim, and sliding-window attention over the last
// sliding_window keys (every layer; null: full attention). The window is in the layer
// descriptors; the runtime attends over its whole cache, which is the same answer as long as the
// context fits the window, so a run whose context is longer is refused (runtime/run/run_plan.cpp).
// HF reference: transformers/models/mistral (MistralConfig.sliding_window defaults to 4096 when
// config.json leaves the key out).
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"

namespace dayzero::model {
namespace {

inline constexpr int64_t kDefaultSlidingWindow = 4096;  // MistralConfig's default

// sliding_window as transformers reads it: absent -> the class default, null -> none (0).
Result<int64_t> sliding_window(const nlohmann::json& c) {
  if (!c.contains("sliding_window")) return kDefaultSlidingWindow;
  DZ_ASSIGN_OR_RETURN(const int64_t w, json_int_or(c, "sliding_window", 0));
  if (w < 0) return Status::InvalidArgument("config.json: key 'sliding_window' must be positive or null");
  return w;
}

class MistralAdapter final : public LlamaLikeAdapter {
 public:
  const char* family() const override { return "mistral"; }
  std::vector<std::string> architectures() const override { return {"MistralForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    DZ_ASSIGN_OR_RETURN(HParams hp, parse_llama_like(c));
    hp.family = family();
    DZ_RETURN_IF_ERROR(sliding_window(c).status());
    return hp;
  }

  // Every layer keeps at most sliding_window keys (hp.raw is the config.json parse_hparams
  // accepted, so the key reads again without error).
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override {
    std::vector<LayerDesc> out = Adapter::layer_kinds(hp);
    const Result<int64_t> window = sliding_window(hp.raw);
    for (auto& d : out) d.cache.window = window.ok() ? *window : 0;
    return out;
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = llama_like_config(s, "mistral", "MistralForCausalLM");
    c["sliding_window"] = 4096;
    return c;
  }
};

}  // namespace

const Adapter& mistral_adapter() {
  static const MistralAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
