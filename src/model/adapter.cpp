// The adapter interface's defaults (adapter.h).
#include "model/adapter.h"

namespace dayzero::model {

std::vector<LayerDesc> Adapter::layer_kinds(const HParams& hp) const {
  std::vector<LayerDesc> out(static_cast<size_t>(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerDesc& d = out[l];
    d.cache.kv_heads = hp.n_head_kv;
    d.cache.head_dim = hp.head_dim;
    if (hp.is_moe_layer(l)) d.ffn = {FfnKind::kExperts, hp.n_ff_expert, hp.n_expert, hp.n_expert_used, 0};
    else d.ffn = {FfnKind::kDense, hp.n_ff, 0, 0, 0};
  }
  return out;
}

std::vector<LayerDesc> describe_layers(const Adapter& adapter, const HParams& hp, const std::vector<TensorSpec>& specs) {
  std::vector<LayerDesc> layers = adapter.layer_kinds(hp);
  count_layer_weights(specs, layers);
  return layers;
}

}  // namespace dayzero::model
