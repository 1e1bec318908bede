// The deepseek_v3 adapter's class, for the families built on it (deepseek_v32 adds the DSA
// indexer): its config parsing, tensor layout and layer, with the attention part as the one
// hook a derived family overrides. Not a registry entry (adapters.h is).
#pragma once

#include "model/adapter.h"

namespace dayzero::model {

class DeepseekV3Adapter : public Adapter {
 public:
  const char* family() const override { return "deepseek_v3"; }
  std::vector<std::string> architectures() const override { return {"DeepseekV3ForCausalLM"}; }
  Result<HParams> parse_hparams(const nlohmann::json& c) const override;
  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override;
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override;
  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override;
  void fill_tiny_defaults(ModelShape& s) const override;
  nlohmann::json make_config(const ModelShape& s) const override;

 protected:
  // The attention tensors of layer l (MLA; a derived family adds its own).
  virtual std::vector<TensorSpec> attention_specs(const HParams& hp, int layer) const;
  // The attention output [n_tokens, n_embd] for the normalised x [n_tokens, n_embd].
  // Collective over the tp group.
  virtual Tensor attention(LayerContext& ctx, int layer, const Tensor& x) const;
};

}  // namespace dayzero::model
