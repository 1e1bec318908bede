// DeepSeek-V3's decoder with DeepSeek Sparse Attention, for the DSA families (deepseek_v32,
// glm_moe_dsa): each MLA layer's tensors plus its indexer's (none on a layer that reuses the
// previous layer's top-k), and MLA masked by the keys the layer's indexer (or the previous
// one's) selected. The families differ only in config reading and generated configs.
#pragma once

#include "model/adapters/deepseek_v3.h"
#include "model/blocks/dsa_indexer.h"
#include "model/blocks/mla.h"

namespace dayzero::model {

class DsaAdapter : public DeepseekV3Adapter {
 protected:
  std::vector<TensorSpec> attention_specs(const HParams& hp, int layer) const override {
    std::vector<TensorSpec> s = DeepseekV3Adapter::attention_specs(hp, layer);
    for (auto& t : blocks::indexer_specs(hp, layer)) s.push_back(std::move(t));
    return s;
  }

  Tensor attention(LayerContext& ctx, int layer, const Tensor& x) const override {
    const blocks::KeySelector select = [&](const Tensor& q_resid) {
      return blocks::dsa_layer_keys(ctx, layer, x, q_resid);
    };
    return blocks::mla_attention(ctx, blocks::mla_names(ctx.hp, layer), x, &select);
  }
};

}  // namespace dayzero::model
