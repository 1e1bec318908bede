// kimi_k25: Kimi-K2.5 (KimiK25ForConditionalGeneration), the published config and tensor layout.
// MoonViT: patch conv with bias, a learned [h, w, d] position table resampled bicubically to the
// image's grid, fused wqkv with 2-D RoPE (width / height interleaved per frequency), LayerNorm,
// GELU-tanh MLP, a final LayerNorm; a 2x2 merge; the patchmerger projector (per-patch LayerNorm,
// Linear, GELU, Linear) into the text width. The text model is deepseek_v3 (text_config
// model_type kimi_k2) run through that adapter under "language_model."; its quantization_config
// (compressed-tensors pack-quantized INT4 routed experts) is checkpoint/pack_quantized.h.
// HF reference: transformers/models/kimi_k25 and its conversion_mapping.py entry.
#include "checkpoint/pack_quantized.h"
#include "core/json.h"
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/vision.h"
#include "model/pack_quant_specs.h"

namespace dayzero::model {
namespace {

// The published names (the remote code's MoonViT), as conversion_mapping.py maps them.
const blocks::VisionNames& moonvit_names() {
  static const blocks::VisionNames n = [] {
    const std::string v = "vision_tower.", l = v + "encoder.blocks.{L}.", p = "mm_projector.";
    blocks::VisionNames x;
    x.patch_w = v + "patch_embed.proj.weight";
    x.patch_b = v + "patch_embed.proj.bias";
    x.pos_embedding = v + "patch_embed.pos_emb.weight";
    x.ln1_w = l + "norm0.weight";
    x.ln1_b = l + "norm0.bias";
    x.ln2_w = l + "norm1.weight";
    x.ln2_b = l + "norm1.bias";
    x.qkv_w = l + "wqkv.weight";
    x.qkv_b = l + "wqkv.bias";
    x.o_w = l + "wo.weight";
    x.o_b = l + "wo.bias";
    x.fc1_w = l + "mlp.fc0.weight";
    x.fc1_b = l + "mlp.fc0.bias";
    x.fc2_w = l + "mlp.fc1.weight";
    x.fc2_b = l + "mlp.fc1.bias";
    x.post_norm_w = v + "encoder.final_layernorm.weight";
    x.post_norm_b = v + "encoder.final_layernorm.bias";
    x.proj_norm_w = p + "pre_norm.weight";
    x.proj_norm_b = p + "pre_norm.bias";
    x.proj1_w = p + "proj.0.weight";
    x.proj1_b = p + "proj.0.bias";
    x.proj2_w = p + "proj.2.weight";
    x.proj2_b = p + "proj.2.bias";
    return x;
  }();
  return n;
}

const Adapter& text_adapter() { return deepseek_v3_adapter(); }

// A string key that must be absent or one of the values the implementation follows.
Status expect_string(const nlohmann::json& v, const char* key, std::initializer_list<const char*> allowed) {
  if (!v.contains(key) || v[key].is_null()) return Status::Ok();
  std::string list;
  for (const char* a : allowed) {
    if (v[key] == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Status::Unsupported("config.json: vision_config." + std::string(key) + " " + json_excerpt(v[key]) +
                             " is not supported (" + list + ")");
}

// The text model's quantization_config (config.json text_config), when it has one.
Result<std::optional<checkpoint::PackQuant>> text_quant(const nlohmann::json& c) {
  return checkpoint::parse_pack_quant(c["text_config"], "config.json text_config");
}

class KimiK25Adapter final : public Adapter {
 public:
  const char* family() const override { return "kimi_k25"; }
  std::vector<std::string> architectures() const override {
    return {"KimiK25ForConditionalGeneration", "Kimi_K25ForConditionalGeneration"};
  }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    if (!c.is_object()) return Status::InvalidArgument("config.json: top level is not an object");
    if (!c.contains("text_config") || !c["text_config"].is_object())
      return Status::InvalidArgument("config.json: key 'text_config' is missing or not an object");
    if (!c.contains("vision_config") || !c["vision_config"].is_object())
      return Status::InvalidArgument("config.json: key 'vision_config' is missing or not an object");
    if (c.contains("quantization_config") && !c["quantization_config"].is_null())
      return Status::Unsupported("config.json: a top-level quantization_config is not supported (Kimi-K2.5 carries "
                                 "it in text_config)");
    nlohmann::json tc = c["text_config"];
    DZ_ASSIGN_OR_RETURN(std::string tmt, json_string_or(tc, "model_type", "deepseek_v3"));
    if (tmt != "kimi_k2" && tmt != "deepseek_v3")
      return Status::Unsupported("config.json: text_config.model_type '" + tmt + "' is not supported (kimi_k2, deepseek_v3)");
    // The text quantization is this family's (INT4 pack-quantized); deepseek_v3 reads FP8 only.
    DZ_ASSIGN_OR_RETURN(auto quant, text_quant(c));
    (void)quant;
    tc.erase("quantization_config");
    // Kimi_K25Config's own tie_word_embeddings governs the head (its default: true).
    DZ_ASSIGN_OR_RETURN(bool tie, json_bool_or(c, "tie_word_embeddings", true));
    tc["tie_word_embeddings"] = tie;
    auto th = text_adapter().parse_hparams(tc);
    if (!th.ok()) return Status(th.status().code(), "text_config: " + th.status().message());
    HParams hp = std::move(*th);
    hp.family = family();
    hp.model_type = "kimi_k25";
    hp.raw = c;

    const nlohmann::json& v = c["vision_config"];
    DZ_RETURN_IF_ERROR(expect_string(v, "mm_projector_type", {"patchmerger"}));
    DZ_RETURN_IF_ERROR(expect_string(v, "projector_hidden_act", {"gelu"}));
    DZ_RETURN_IF_ERROR(expect_string(v, "pos_emb_type", {"divided_fixed"}));
    DZ_RETURN_IF_ERROR(expect_string(v, "merge_type", {"sd2_tpool"}));
    VisionParams& vp = hp.vision;
    vp.enabled = true;
    DZ_ASSIGN_OR_RETURN(vp.n_embd, json_int(v, "vt_hidden_size"));
    DZ_ASSIGN_OR_RETURN(vp.n_ff, json_int(v, "vt_intermediate_size"));
    DZ_ASSIGN_OR_RETURN(vp.n_layer, json_int(v, "vt_num_hidden_layers"));
    DZ_ASSIGN_OR_RETURN(vp.n_head, json_int(v, "vt_num_attention_heads"));
    DZ_ASSIGN_OR_RETURN(vp.patch_size, json_int_or(v, "patch_size", 14));
    DZ_ASSIGN_OR_RETURN(vp.pos_h, json_int_or(v, "init_pos_emb_height", 64));
    DZ_ASSIGN_OR_RETURN(vp.pos_w, json_int_or(v, "init_pos_emb_width", 64));
    DZ_ASSIGN_OR_RETURN(vp.projector_norm_eps, json_double_or(v, "projector_ln_eps", 1e-5));
    for (int64_t x : {vp.patch_size, vp.pos_h, vp.pos_w})
      if (x <= 0) return Status::InvalidArgument("config.json: vision_config patch and position-table sizes must be positive");
    if (vp.n_embd % vp.n_head != 0 || (vp.n_embd / vp.n_head) % 4 != 0)
      return Status::InvalidArgument("config.json: vision_config.vt_hidden_size " + std::to_string(vp.n_embd) + " over " +
                                     std::to_string(vp.n_head) +
                                     " heads does not give a head size that is a multiple of 4 (2-D RoPE)");
    int64_t k = 2;
    if (v.contains("merge_kernel_size") && !v["merge_kernel_size"].is_null()) {
      const auto& m = v["merge_kernel_size"];
      if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer() ||
          m[0].get<int64_t>() <= 0)
        return Status::InvalidArgument("config.json: vision_config.merge_kernel_size " + json_excerpt(m) +
                                       " is not two positive integers");
      if (m[0] != m[1])
        return Status::Unsupported("config.json: vision_config.merge_kernel_size " + json_excerpt(m) +
                                   ": only a square merge is supported");
      k = m[0].get<int64_t>();
    }
    for (const char* key : {"mm_hidden_size"})
      if (v.contains(key) && !v[key].is_null() && v[key] != vp.n_embd)
        return Status::InvalidArgument("config.json: vision_config." + std::string(key) + " " + json_excerpt(v[key]) +
                                       " is not vt_hidden_size " + std::to_string(vp.n_embd));
    if (v.contains("text_hidden_size") && !v["text_hidden_size"].is_null() && v["text_hidden_size"] != hp.n_embd)
      return Status::InvalidArgument("config.json: vision_config.text_hidden_size " + json_excerpt(v["text_hidden_size"]) +
                                     " is not text_config.hidden_size " + std::to_string(hp.n_embd));
    vp.n_channels = 3;
    vp.norm_eps = 1e-5;  // MoonViT's LayerNorms
    vp.class_token = false;
    vp.drop_class_token = false;
    vp.patch_bias = true;
    vp.pos_embed = VisionParams::PosEmbed::kLearnedResampled;
    vp.rope = VisionParams::Rope2d::kInterleaved;
    vp.rope_theta = 10000.0;
    vp.pre_norm = false;
    vp.fused_qkv = true;
    vp.act = VisionParams::Act::kGeluTanh;
    vp.n_layer_run = vp.n_layer;
    vp.post_norm = true;
    vp.merge_kernel = k;
    vp.projector_pre_norm = true;
    vp.projector_act = VisionParams::Act::kGelu;
    vp.projector_hidden = vp.n_embd * k * k;
    DZ_ASSIGN_OR_RETURN(int64_t media, json_int_or(c, "media_placeholder_token_id", 163605));
    if (media < 0 || media >= hp.n_vocab)
      return Status::InvalidArgument("config.json: media_placeholder_token_id " + std::to_string(media) +
                                     " is outside the vocabulary of " + std::to_string(hp.n_vocab));
    vp.image_token_id = static_cast<int32_t>(media);
    return hp;
  }

  // The text model's layers (the tower runs outside the decoder layers).
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override { return text_adapter().layer_kinds(hp); }

  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = text_adapter().tensor_specs(hp);
    // The ignore list names the text model's modules (model.layers.{L}..., lm_head).
    auto quant = text_quant(hp.raw);
    DZ_CHECK(quant.ok(), quant.status().message());
    if (*quant) apply_pack_quant(s, **quant);
    prefix_tensor_names(s, kLanguageModelPrefix);
    auto v = blocks::vision_specs(hp.vision, moonvit_names(), hp.n_embd);
    s.insert(s.end(), v.begin(), v.end());
    return s;
  }

  std::string embed_name() const override { return kLanguageModelPrefix + text_adapter().embed_name(); }
  std::string final_norm_name() const override { return kLanguageModelPrefix + text_adapter().final_norm_name(); }
  std::string lm_head_name(const HParams& hp) const override {
    return hp.tie_embeddings ? embed_name() : std::string(kLanguageModelPrefix) + "lm_head.weight";
  }

  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override {
    const Weights text_weights(ctx.w, kLanguageModelPrefix);
    LayerContext text = ctx.with_weights(text_weights);
    text_adapter().forward_layer(text, layer, hidden);
  }

  Tensor image_features(backend::Backend& be, const HParams& hp, const Weights& w, const image::ProcessedImage& img,
                        ActivationSink* sink) const override {
    const blocks::VisionContext ctx{be, hp.vision, moonvit_names(), w, sink};
    return blocks::image_features(ctx, img);
  }

  void fill_tiny_defaults(ModelShape& s) const override { text_adapter().fill_tiny_defaults(s); }
  std::string image_placeholder_text() const override { return "<|media_pad|>"; }

  // Generated models: deepseek_v3's tiny text model as kimi_k2 (its quantization_config as
  // published when shape.quant is "int4": routed experts INT4 in groups of 32), a 2-layer tower
  // of width 32 (2 heads of 16) with a 4x4 position table, so every image's grid resamples it.
  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json text = text_adapter().make_config(s);
    text["model_type"] = "kimi_k2";
    text["architectures"] = {"DeepseekV3ForCausalLM"};
    if (s.quant == "int4") {
      text["quantization_config"] = {
          {"config_groups",
           {{"group_0",
             {{"input_activations", nullptr},
              {"output_activations", nullptr},
              {"targets", {"Linear"}},
              {"weights",
               {{"actorder", nullptr},
                {"block_structure", nullptr},
                {"dynamic", false},
                {"group_size", 32},
                {"num_bits", 4},
                {"observer", "minmax"},
                {"observer_kwargs", nlohmann::json::object()},
                {"strategy", "group"},
                {"symmetric", true},
                {"type", "int"}}}}}}},
          {"format", "pack-quantized"},
          {"ignore", {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
    }
    // The tokenizer's <|media_pad|> (make-model adds it), else the last id of the vocabulary.
    const int64_t media = s.image_token_id >= 0 ? s.image_token_id : s.n_vocab - 1;
    nlohmann::json c = {
        {"architectures", {"KimiK25ForConditionalGeneration"}},
        {"model_type", "kimi_k25"},
        {"media_placeholder_token_id", media},
        {"tie_word_embeddings", s.tie_embeddings},
        {"dtype", s.torch_dtype},
        {"text_config", text},
        {"vision_config",
         {{"init_pos_emb_height", 4},
          {"init_pos_emb_width", 4},
          {"init_pos_emb_time", 4},
          {"merge_kernel_size", {2, 2}},
          {"merge_type", "sd2_tpool"},
          {"mm_hidden_size", 32},
          {"mm_projector_type", "patchmerger"},
          {"patch_size", 14},
          {"pos_emb_type", "divided_fixed"},
          {"projector_hidden_act", "gelu"},
          {"projector_ln_eps", 1e-5},
          {"text_hidden_size", s.n_embd},
          {"vt_hidden_size", 32},
          {"vt_intermediate_size", 64},
          {"vt_num_attention_heads", 2},
          {"vt_num_hidden_layers", 2}}},
    };
    if (s.bos_id >= 0) c["bos_token_id"] = s.bos_id;
    if (s.eos_id >= 0) c["eos_token_id"] = s.eos_id;
    return c;
  }

  // Kimi_K25ImageProcessor with its class defaults except a budget of 256 patches.
  nlohmann::json make_preprocessor_config(const nlohmann::json& config) const override {
    return {
        {"image_processor_type", "Kimi_K25ImageProcessor"},
        {"do_resize", true},
        {"size", {{"max_height", 512}, {"max_width", 512}}},
        {"resample", 3},
        {"max_patches", 256},
        {"patch_size", config["vision_config"]["patch_size"]},
        {"merge_size", config["vision_config"]["merge_kernel_size"][0]},
        {"do_rescale", true},
        {"rescale_factor", 1.0 / 255.0},
        {"do_normalize", true},
        {"image_mean", {0.5, 0.5, 0.5}},
        {"image_std", {0.5, 0.5, 0.5}},
        {"do_convert_rgb", true},
    };
  }
};

}  // namespace

const Adapter& kimi_k25_adapter() {
  static const KimiK25Adapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
