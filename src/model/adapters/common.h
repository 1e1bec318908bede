// Pieces shared by the Llama-like adapters: the config.json keys every HF Llama-style
// model carries (for generated checkpoints), and the common tensor layout and layer.
#pragma once

#include <nlohmann/json.hpp>

#include "model/adapter.h"
#include "model/blocks/dense_decoder.h"

namespace dayzero::model {

// Where a multimodal checkpoint (llava, kimi_k25) keeps its text model's tensors.
inline constexpr const char* kLanguageModelPrefix = "language_model.";

// Marks the weight `w` as block-quantized FP8 (the fp8-block row of the stored-format table in
// hp's block size), its scales in the tensor `scale_name`, and returns that tensor's spec: one
// scale per block, replicated, read with its weight rather than as a weight of its own.
inline TensorSpec attach_block_scale(TensorSpec& w, std::string scale_name, const HParams& hp) {
  w.stored = {&stored_format(StoredScheme::kFp8Block), hp.quant_block_rows, hp.quant_block_cols,
              StoredPlacement::kOwnName, std::move(scale_name)};
  TensorSpec sc{w.stored.scale,
                {(w.shape[0] + hp.quant_block_rows - 1) / hp.quant_block_rows,
                 (w.shape[1] + hp.quant_block_cols - 1) / hp.quant_block_cols},
                ShardRule::kReplicated,
                w.layer};
  sc.skip_load = true;
  sc.component = Component::kQuantScale;
  return sc;
}

inline nlohmann::json llama_like_config(const ModelShape& s, const char* model_type, const char* architecture) {
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  nlohmann::json c = {
      {"architectures", {architecture}},
      {"model_type", model_type},
      {"vocab_size", s.n_vocab},
      {"hidden_size", s.n_embd},
      {"intermediate_size", s.n_ff},
      {"num_hidden_layers", s.n_layer},
      {"num_attention_heads", s.n_head},
      {"num_key_value_heads", s.n_head_kv},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", s.max_position},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", s.rope_theta},
      {"tie_word_embeddings", s.tie_embeddings},
      {"torch_dtype", s.torch_dtype},
      {"use_cache", true},
      {"initializer_range", 0.02},
  };
  if (s.bos_id >= 0) c["bos_token_id"] = s.bos_id;
  if (s.eos_id >= 0) c["eos_token_id"] = s.eos_id;
  return c;
}


// Base of the Llama-like families: the same tensor layout and decoder layer; a family adds
// its config parsing (which optional parts exist) and its config.json keys.
class LlamaLikeAdapter : public Adapter {
 public:
  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = blocks::dense_model_specs(hp);
    for (int l = 0; l < hp.n_layer; ++l) {
      auto layer = blocks::dense_decoder_specs(hp, l);
      s.insert(s.end(), layer.begin(), layer.end());
    }
    return s;
  }
  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override {
    blocks::dense_decoder_layer(ctx, layer, hidden);
  }
};

}  // namespace dayzero::model
