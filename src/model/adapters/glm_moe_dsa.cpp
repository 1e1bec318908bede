// glm_moe_dsa: GLM-5, i.e. DeepSeek-V3.2's layout (MLA with q LoRA and interleaved rope, sigmoid
// group-routed experts with a shared expert, dense first layers; DeepseekV3Adapter) with DSA whose
// indexer rotates its leading qk_rope_head_dim in interleaved pairs, and per-layer indexer types:
// a "shared" layer has no indexer of its own and reuses the previous layer's top-k (no indexer
// tensors, no indexer key cache there). mlp_layer_types, when given, names the dense layers.
// Not deepseek_v32 (half-split indexer rope, an indexer in every layer). HF reference:
// transformers/models/glm_moe_dsa.
#include "model/adapters/adapters.h"
#include "model/adapters/dsa_adapter.h"
#include "model/blocks/dsa_indexer.h"
#include "model/blocks/mla.h"
#include "model/dsa_config.h"

namespace dayzero::model {
namespace {

class GlmMoeDsaAdapter final : public DsaAdapter {
 public:
  const char* family() const override { return "glm_moe_dsa"; }
  std::vector<std::string> architectures() const override { return {"GlmMoeDsaForCausalLM"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    // transformers' GLM-5 rotates both MLA and its indexer interleaved whatever these keys say.
    for (const char* key : {"rope_interleave", "indexer_rope_interleave"}) {
      DZ_ASSIGN_OR_RETURN(const bool interleave, json_bool_or(c, key, true));
      if (!interleave)
        return Status::Unsupported(std::string("config.json: glm_moe_dsa key '") + key +
                                   "' is false, but GLM-5 rotates interleaved (transformers ignores the key)");
    }
    DZ_ASSIGN_OR_RETURN(HParams hp, DeepseekV3Adapter::parse_hparams(c));
    hp.deepseek().mla.rope_interleave = true;
    DZ_RETURN_IF_ERROR(read_dsa_indexer_sizes(c, "glm_moe_dsa", hp));
    DsaParams& d = hp.deepseek().dsa;
    d.rope_interleave = true;
    DZ_ASSIGN_OR_RETURN(d.shared, dsa_shared_layers(c, hp.n_layer));
    DZ_ASSIGN_OR_RETURN(const std::vector<std::string> attn,
                        config_layer_list(c, "layer_types", hp.n_layer, {"indexed_attention"}));
    (void)attn;
    DZ_ASSIGN_OR_RETURN(const std::vector<std::string> mlp, config_layer_list(c, "mlp_layer_types", hp.n_layer, {"dense", "sparse"}));
    if (!mlp.empty()) {
      hp.dense_layers.clear();
      for (int l = 0; l < static_cast<int>(mlp.size()); ++l)
        if (mlp[l] == "dense") hp.dense_layers.push_back(l);
    }
    return hp;
  }

  // Generated models: deepseek_v3's tiny sizes with GLM-5's default rope (no YaRN) and an indexer
  // of 8 heads x 16 keeping 8 keys; from 3 layers on, every other layer from the second reuses
  // the previous layer's top-k (indexer_types), so a pipeline split in the middle falls on a full one.
  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json c = DeepseekV3Adapter::make_config(s);
    c["architectures"] = {"GlmMoeDsaForCausalLM"};
    c["model_type"] = "glm_moe_dsa";
    c.erase("rope_scaling");
    c["head_dim"] = c["qk_rope_head_dim"];
    c["indexer_rope_interleave"] = true;
    c["index_topk"] = 8;
    c["index_n_heads"] = 8;
    c["index_head_dim"] = 16;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t l = 0; l < s.n_layer; ++l) types.push_back(s.n_layer >= 3 && l % 2 == 1 ? "shared" : "full");
    c["indexer_types"] = types;
    return c;
  }

};

}  // namespace

const Adapter& glm_moe_dsa_adapter() {
  static const GlmMoeDsaAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
