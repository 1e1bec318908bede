// The qwen3_next adapter's class, for the families built on it (qwen3_5_moe's text model): the
// hybrid decoder of Gated DeltaNet layers (blocks/gated_deltanet) interleaved with gated
// full-attention layers as layer_types / full_attention_interval say, (1 + w) RMSNorms, and
// softmax-routed experts next to a sigmoid-gated shared expert. Not a registry entry (adapters.h is).
#pragma once

#include "model/adapter.h"
#include "model/blocks/attention.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"

namespace dayzero::model {

class Qwen3NextAdapter : public Adapter {
 public:
  const char* family() const override { return "qwen3_next"; }
  std::vector<std::string> architectures() const override { return {"Qwen3NextForCausalLM"}; }
  // The text fields of c (qwen3_next: the top level).
  Result<HParams> parse_hparams(const nlohmann::json& c) const override;
  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override;
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override;
  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override;
  void fill_tiny_defaults(ModelShape& s) const override;
  nlohmann::json make_config(const ModelShape& s) const override;

 protected:
  // Names of layer tensors: "model.layers.{L}." + rest (a nested family prefixes them).
  virtual std::string layer_name(int layer, const std::string& rest) const;
  blocks::AttentionNames attention_names(const HParams& hp, int layer) const;
  blocks::MoeNames moe_names() const;
  blocks::MlpNames mlp_names(int layer, const char* part) const;  // part: "mlp" or "mlp.shared_expert"
  virtual blocks::GatedDeltaNetNames linear_names(int layer) const;
  // The feed-forward of a layer (dense MLP, or routed experts + gated shared expert).
  Tensor ffn(LayerContext& ctx, int layer, const Tensor& x) const;
};

}  // namespace dayzero::model
