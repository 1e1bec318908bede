// deepseek_v32: DeepSeek-V3.2(-Exp), i.e. deepseek_v3 (MLA, sigmoid group-routed experts, YaRN,
// FP8 checkpoints; DeepseekV3Adapter) with DeepSeek Sparse Attention: every layer's lightning
// indexer (blocks/dsa_indexer) picks index_topk keys per query and MLA attends over those only.
// The main MLA rope is always interleaved (the config has no rope_interleave), the q LoRA always
// present. Not GLM-5's glm_moe_dsa (interleaved indexer rope, shared top-k across layers).
// HF reference: transformers/models/deepseek_v32.
#include "model/adapters/adapters.h"
#include "model/adapters/dsa_adapter.h"
#include "model/blocks/dsa_indexer.h"
#include "model/blocks/mla.h"
#include "model/dsa_config.h"

namespace dayzero::model {
namespace {

class DeepseekV32Adapter final : public DsaAdapter {
 public:
  const char* family() const override { return "deepseek_v32"; }
  std::vector<std::string> architectures() const override { return {"DeepseekV32ForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    if (c.contains("rope_interleave"))
      return Status::InvalidArgument("config.json: deepseek_v32 has no key 'rope_interleave' (its MLA rope is interleaved, "
                                     "its indexer's half-split)");
    DZ_ASSIGN_OR_RETURN(HParams hp, DeepseekV3Adapter::parse_hparams(c));
    hp.deepseek().mla.rope_interleave = true;
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

};

}  // namespace

const Adapter& deepseek_v32_adapter() {
  static const DeepseekV32Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
