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
 public:
  // Every layer keeps its indexer's key whole on each tp rank; a layer reusing the previous
  // layer's selection keeps none and cannot start a pipeline stage (it reads that selection).
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override {
    std::vector<LayerDesc> out = DeepseekV3Adapter::layer_kinds(hp);
    const DsaParams& dsa = hp.deepseek().dsa;
    for (int l = 0; l < static_cast<int>(out.size()); ++l) {
      out[l].mixer = MixerKind::kSparseMla;
      out[l].cache.index_dim = dsa.has_indexer(l) ? dsa.index_head_dim : 0;
      if (l > 0 && dsa.reuses_topk(l)) out[l].stays_with_previous = "reuses the previous layer's DSA top-k";
    }
    return out;
  }

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
