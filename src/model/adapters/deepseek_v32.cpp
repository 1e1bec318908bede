// deepseek_v32: DeepSeek-V3.2(-Exp), i.e. deepseek_v3 (MLA, sigmoid group-routed experts, YaRN,
// FP8 checkpoints; DeepseekV3Adapter) with DeepSeek Sparse Attention: every layer's lightning
// indexer (blocks/dsa_indexer) picks index_topk keys per query and MLA attends over those only.
// The main MLA rope is always interleaved (the config has no rope_interleave), the q LoRA always
// present. Not GLM-5's glm_moe_dsa (interleaved indexer rope, shared top-k across layers).
// HF reference: transformers/models/deepseek_v32.
#include "model/adapters/adapters.h"
#include "model/adapters/deepseek_v3.h"
#include "model/blocks/dsa_indexer.h"
#include "model/blocks/mla.h"
#include "model/dsa_config.h"

namespace dayzero::model {
namespace {

class DeepseekV32Adapter final : public DeepseekV3Adapter {
 public:
  const char* family() const override { return "deepseek_v32"; }
  std::vector<std::string> architectures() const override { return {"DeepseekV32ForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    if (c.contains("rope_interleave"))
      return Status::InvalidArgument("config.json: deepseek_v32 has no key 'rope_interleave' (its MLA rope is interleaved, "
                                     "its indexer's half-split)");
    DZ_ASSIGN_OR_RETURN(HParams hp, DeepseekV3Adapter::parse_hparams(c));
    hp.mla.rope_interleave = true;
    DZ_RETURN_IF_ERROR(read_dsa_indexer_sizes(c, "deepseek_v32", hp));
    return hp;
  }

  // Generated models: deepseek_v3's tiny sizes plus an indexer of 8 heads x 16 keeping 8 keys.
  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = DeepseekV3Adapter::make_config(s);
    c["architectures"] = {"DeepseekV32ForCausalLM"};
    c["model_type"] = "deepseek_v32";
    c.erase("rope_interleave");
    c["index_topk"] = 8;
    c["index_n_heads"] = 8;
    c["index_head_dim"] = 16;
    return c;
  }

 protected:
  std::vector<TensorSpec> attention_specs(const HParams& hp, int layer) const override {
    std::vector<TensorSpec> s = DeepseekV3Adapter::attention_specs(hp, layer);
    for (auto& t : blocks::indexer_specs(hp, layer)) s.push_back(std::move(t));
    return s;
  }

  Tensor attention(LayerContext& ctx, int layer, const Tensor& x) const override {
    const blocks::IndexerNames names = blocks::indexer_names(layer);
    const blocks::KeySelector select = [&](const Tensor& q_resid) {
      return blocks::dsa_select_keys(ctx, names, layer, x, q_resid);
    };
    return blocks::mla_attention(ctx, blocks::mla_names(ctx.hp, layer), x, &select);
  }
};

}  // namespace

const Adapter& deepseek_v32_adapter() {
  static const DeepseekV32Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
