// qwen3_5_moe: the text model of Qwen3.5 MoE (Qwen3.5-397B-A17B), a Qwen3_5MoeForConditionalGeneration
// checkpoint: qwen3_next's hybrid decoder (Qwen3NextAdapter) read from the nested text_config, its
// tensors under model.language_model.*, the Gated DeltaNet input projections split into
// in_proj_qkv / in_proj_z / in_proj_b / in_proj_a. Text prompts only: the interleaved M-RoPE
// (mrope_section over t/h/w) gives every axis the same position for text, so it is the 1-D
// rotary of the partial_rotary_factor dims; the vision tower (model.visual.*) is declared so the
// checkpoint check claims it, never loaded, until the vision core runs it.
// HF reference: transformers/models/qwen3_5_moe (and qwen3_5, qwen3_next).
#include "core/json.h"
#include "model/adapters/adapters.h"
#include "model/adapters/qwen3_next.h"

namespace dayzero::model {
namespace {

class Qwen35MoeAdapter final : public Qwen3NextAdapter {
 public:
  const char* family() const override { return "qwen3_5_moe"; }
  std::vector<std::string> architectures() const override { return {"Qwen3_5MoeForConditionalGeneration"}; }
  std::string embed_name() const override { return "model.language_model.embed_tokens.weight"; }
  std::string final_norm_name() const override { return "model.language_model.norm.weight"; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    if (!c.is_object()) return Status::InvalidArgument("config.json: top level is not an object");
    auto it = c.find("text_config");
    if (it == c.end() || !it->is_object())
      return Status::InvalidArgument("config.json: qwen3_5_moe needs a 'text_config' object (the text model's sizes)");
    // The published text_config has no intermediate_size: every layer is MoE. A dense width is
    // needed only by mlp_only_layers; otherwise the shared expert's stands in for the memory
    // model's activation estimate.
    nlohmann::json text = *it;
    if (!text.contains("intermediate_size") && text.contains("shared_expert_intermediate_size")) {
      DZ_ASSIGN_OR_RETURN(const std::vector<int64_t> mlp_only, json_int_list_or_empty(text, "mlp_only_layers"));
      DZ_ASSIGN_OR_RETURN(const int64_t step, json_int_or(text, "decoder_sparse_step", 1));
      if (mlp_only.empty() && step == 1) text["intermediate_size"] = text["shared_expert_intermediate_size"];
    }
    DZ_ASSIGN_OR_RETURN(HParams hp, Qwen3NextAdapter::parse_hparams(text));
    hp.family = family();
    hp.model_type = "qwen3_5_moe";
    DZ_ASSIGN_OR_RETURN(hp.tie_embeddings, json_bool_or(c, "tie_word_embeddings", hp.tie_embeddings));
    // Interleaved M-RoPE: its sections must cover the rotary half-width; for text every section
    // sees the same position, so the 1-D inv_freq of rope_dim is exact.
    if (auto rp = text.find("rope_parameters"); rp != text.end() && rp->is_object()) {
      DZ_ASSIGN_OR_RETURN(const std::vector<int64_t> sections, json_int_list_or_empty(*rp, "mrope_section"));
      DZ_ASSIGN_OR_RETURN(const bool interleaved, json_bool_or(*rp, "mrope_interleaved", true));
      if (!sections.empty() && !interleaved)
        return Status::Unsupported("config.json: text_config.rope_parameters.mrope_interleaved=false is not supported");
      int64_t sum = 0;
      for (int64_t v : sections) sum += v;
      if (!sections.empty() && sum != hp.rope_dim / 2)
        return Status::InvalidArgument("config.json: text_config.rope_parameters.mrope_section sums to " +
                                       std::to_string(sum) + ", not the rotary half-width " +
                                       std::to_string(hp.rope_dim / 2));
    }
    hp.raw = c;
    return hp;
  }

  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = Qwen3NextAdapter::tensor_specs(hp);
    for (auto& t : vision_specs(hp.raw)) s.push_back(std::move(t));
    return s;
  }

  void fill_tiny_defaults(ModelShape& s) const override { Qwen3NextAdapter::fill_tiny_defaults(s); }

  // Generated models: qwen3_next's tiny text model nested as text_config (its linear projections
  // split), an M-RoPE section list over the rotary half-width, and a one-block vision tower of
  // width 32 (patch 4, temporal patch 2, 2 x 2 merge) in the published layout.
  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json text = Qwen3NextAdapter::make_config(s);
    text.erase("architectures");
    text["model_type"] = "qwen3_5_moe_text";
    text["attn_output_gate"] = true;
    const int64_t head_dim = text["head_dim"].get<int64_t>();
    const auto half = static_cast<int64_t>(static_cast<double>(head_dim) * 0.25) / 2;
    text["rope_parameters"] = {{"rope_type", "default"},
                               {"rope_theta", s.rope_theta},
                               {"partial_rotary_factor", 0.25},
                               {"mrope_interleaved", true},
                               {"mrope_section", {half - 2 * (half / 3), half / 3, half / 3}}};
    text.erase("rope_theta");
    text.erase("partial_rotary_factor");
    const bool tie = text["tie_word_embeddings"].get<bool>();
    text.erase("tie_word_embeddings");
    nlohmann::json c = {
        {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
        {"model_type", "qwen3_5_moe"},
        {"text_config", text},
        {"vision_config",
         {{"model_type", "qwen3_5_moe"}, {"depth", 1}, {"hidden_size", 32}, {"num_heads", 2}, {"intermediate_size", 64},
          {"hidden_act", "gelu_pytorch_tanh"}, {"in_channels", 3}, {"patch_size", 4}, {"temporal_patch_size", 2},
          {"spatial_merge_size", 2}, {"num_position_embeddings", 16}, {"out_hidden_size", s.n_embd},
          {"deepstack_visual_indexes", nlohmann::json::array()}, {"initializer_range", 0.02}}},
        {"image_token_id", s.n_vocab - 4},
        {"video_token_id", s.n_vocab - 3},
        {"vision_start_token_id", s.n_vocab - 6},
        {"vision_end_token_id", s.n_vocab - 5},
        {"tie_word_embeddings", tie},
        {"torch_dtype", s.torch_dtype},
    };
    return c;
  }

 protected:
  std::string layer_name(int layer, const std::string& rest) const override {
    return "model.language_model.layers." + std::to_string(layer) + "." + rest;
  }

  blocks::GatedDeltaNetNames linear_names(int layer) const override {
    blocks::GatedDeltaNetNames n = Qwen3NextAdapter::linear_names(layer);
    n.in_proj_qkvz.clear();
    n.in_proj_ba.clear();
    n.in_proj_qkv = layer_name(layer, "linear_attn.in_proj_qkv.weight");
    n.in_proj_z = layer_name(layer, "linear_attn.in_proj_z.weight");
    n.in_proj_b = layer_name(layer, "linear_attn.in_proj_b.weight");
    n.in_proj_a = layer_name(layer, "linear_attn.in_proj_a.weight");
    return n;
  }

 private:
  // The vision tower and merger of vision_config, claimed (shape-checked) and never loaded.
  static std::vector<TensorSpec> vision_specs(const nlohmann::json& c) {
    std::vector<TensorSpec> s;
    auto it = c.find("vision_config");
    if (it == c.end() || !it->is_object()) return s;
    const nlohmann::json& v = *it;
    auto get = [&](const char* k, int64_t fallback) {
      auto f = v.find(k);
      return f != v.end() && f->is_number_integer() ? f->get<int64_t>() : fallback;
    };
    const int64_t h = get("hidden_size", 0), depth = get("depth", 0), ff = get("intermediate_size", 0);
    const int64_t p = get("patch_size", 16), tp = get("temporal_patch_size", 2), ch = get("in_channels", 3);
    const int64_t m = get("spatial_merge_size", 2), out = get("out_hidden_size", 0), pos = get("num_position_embeddings", 0);
    if (h <= 0 || depth <= 0) return s;
    auto add = [&](const std::string& name, Shape shape, Component comp) {
      TensorSpec t{"model.visual." + name, std::move(shape), ShardRule::kReplicated, -1};
      t.skip_load = true;
      t.component = comp;
      s.push_back(std::move(t));
    };
    using C = Component;
    add("patch_embed.proj.weight", {h, ch, tp, p, p}, C::kVision);
    add("patch_embed.proj.bias", {h}, C::kVision);
    add("pos_embed.weight", {pos, h}, C::kVision);
    for (int64_t l = 0; l < depth; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      add(b + "norm1.weight", {h}, C::kVision);
      add(b + "norm1.bias", {h}, C::kVision);
      add(b + "attn.qkv.weight", {3 * h, h}, C::kVision);
      add(b + "attn.qkv.bias", {3 * h}, C::kVision);
      add(b + "attn.proj.weight", {h, h}, C::kVision);
      add(b + "attn.proj.bias", {h}, C::kVision);
      add(b + "norm2.weight", {h}, C::kVision);
      add(b + "norm2.bias", {h}, C::kVision);
      add(b + "mlp.linear_fc1.weight", {ff, h}, C::kVision);
      add(b + "mlp.linear_fc1.bias", {ff}, C::kVision);
      add(b + "mlp.linear_fc2.weight", {h, ff}, C::kVision);
      add(b + "mlp.linear_fc2.bias", {h}, C::kVision);
    }
    const int64_t merged = h * m * m;
    add("merger.norm.weight", {h}, C::kProjector);
    add("merger.norm.bias", {h}, C::kProjector);
    add("merger.linear_fc1.weight", {merged, merged}, C::kProjector);
    add("merger.linear_fc1.bias", {merged}, C::kProjector);
    add("merger.linear_fc2.weight", {out, merged}, C::kProjector);
    add("merger.linear_fc2.bias", {out}, C::kProjector);
    return s;
  }
};

}  // namespace

const Adapter& qwen3_5_moe_adapter() {
  static const Qwen35MoeAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
