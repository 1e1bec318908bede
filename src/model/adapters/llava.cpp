// llava: LlavaForConditionalGeneration (llava-1.5 and kin). A CLIP ViT (class token,
// pre_layrnorm, quick_gelu), the hidden state of vision_feature_layer with the class token
// dropped ("default") or kept ("full"), a linear-GELU-linear projector, and any text family of
// the registry from text_config.model_type, run through that family's own adapter under the
// "language_model." prefix. Missing keys take transformers' LlavaConfig / CLIPVisionConfig /
// LlamaConfig defaults. HF reference: transformers/models/llava, models/clip.
#include "core/json.h"
#include "model/adapters/adapters.h"
#include "model/adapters/common.h"
#include "model/blocks/vision.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

// The names of a CLIP vision tower under vision_tower.vision_model and llava's projector.
const blocks::VisionNames& clip_names() {
  static const blocks::VisionNames n = [] {
    const std::string v = "vision_tower.vision_model.", l = v + "encoder.layers.{L}.";
    blocks::VisionNames x;
    x.patch_w = v + "embeddings.patch_embedding.weight";
    x.class_embedding = v + "embeddings.class_embedding";
    x.pos_embedding = v + "embeddings.position_embedding.weight";
    x.pre_norm_w = v + "pre_layrnorm.weight";
    x.pre_norm_b = v + "pre_layrnorm.bias";
    x.ln1_w = l + "layer_norm1.weight";
    x.ln1_b = l + "layer_norm1.bias";
    x.ln2_w = l + "layer_norm2.weight";
    x.ln2_b = l + "layer_norm2.bias";
    x.q_w = l + "self_attn.q_proj.weight";
    x.q_b = l + "self_attn.q_proj.bias";
    x.k_w = l + "self_attn.k_proj.weight";
    x.k_b = l + "self_attn.k_proj.bias";
    x.v_w = l + "self_attn.v_proj.weight";
    x.v_b = l + "self_attn.v_proj.bias";
    x.o_w = l + "self_attn.out_proj.weight";
    x.o_b = l + "self_attn.out_proj.bias";
    x.fc1_w = l + "mlp.fc1.weight";
    x.fc1_b = l + "mlp.fc1.bias";
    x.fc2_w = l + "mlp.fc2.weight";
    x.fc2_b = l + "mlp.fc2.bias";
    x.post_norm_w = v + "post_layernorm.weight";
    x.post_norm_b = v + "post_layernorm.bias";
    x.proj1_w = "multi_modal_projector.linear_1.weight";
    x.proj1_b = "multi_modal_projector.linear_1.bias";
    x.proj2_w = "multi_modal_projector.linear_2.weight";
    x.proj2_b = "multi_modal_projector.linear_2.bias";
    return x;
  }();
  return n;
}

Result<VisionParams::Act> parse_act(const std::string& key, const std::string& act) {
  if (act == "gelu") return VisionParams::Act::kGelu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return VisionParams::Act::kGeluTanh;
  if (act == "quick_gelu") return VisionParams::Act::kQuickGelu;
  return Status::Unsupported("config.json: " + key + " '" + act +
                             "' is not supported (gelu, gelu_pytorch_tanh, gelu_new, quick_gelu)");
}

// text_config with the defaults of its transformers config class filled in where the key is
// absent (LlamaConfig for llama; other text families must carry their sizes).
nlohmann::json text_config_with_defaults(nlohmann::json t, const std::string& model_type) {
  if (model_type != "llama") return t;
  static const nlohmann::json kLlama = {
      {"vocab_size", 32000},          {"hidden_size", 4096},    {"intermediate_size", 11008},
      {"num_hidden_layers", 32},      {"num_attention_heads", 32}, {"max_position_embeddings", 2048},
      {"rms_norm_eps", 1e-6},         {"rope_theta", 10000.0},  {"tie_word_embeddings", false},
      {"attention_bias", false},      {"mlp_bias", false},      {"hidden_act", "silu"},
  };
  for (const auto& [k, v] : kLlama.items())
    if (!t.contains(k) || t[k].is_null()) t[k] = v;
  return t;
}

Result<const Adapter*> text_adapter(const nlohmann::json& c) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& t = c.contains("text_config") && c["text_config"].is_object() ? c["text_config"] : empty;
  DZ_ASSIGN_OR_RETURN(std::string mt, json_string_or(t, "model_type", "llama"));
  if (mt == "llava") return Status::InvalidArgument("config.json: text_config.model_type cannot be llava");
  auto a = find_adapter_by_family(mt);
  if (!a.ok()) return Status::Unsupported("config.json: text_config.model_type: " + a.status().message());
  return *a;
}

class LlavaAdapter final : public Adapter {
 public:
  const char* family() const override { return "llava"; }
  std::vector<std::string> architectures() const override { return {"LlavaForConditionalGeneration"}; }

  Result<HParams> parse_hparams(const nlohmann::json& c) const override {
    if (!c.is_object()) return Status::InvalidArgument("config.json: top level is not an object");
    DZ_ASSIGN_OR_RETURN(const Adapter* text, text_adapter(c));
    const nlohmann::json empty = nlohmann::json::object();
    if (c.contains("text_config") && !c["text_config"].is_null() && !c["text_config"].is_object())
      return Status::InvalidArgument("config.json: key 'text_config' must be an object");
    if (c.contains("vision_config") && !c["vision_config"].is_null() && !c["vision_config"].is_object())
      return Status::InvalidArgument("config.json: key 'vision_config' must be an object");
    nlohmann::json tc = c.contains("text_config") && c["text_config"].is_object() ? c["text_config"] : empty;
    tc["model_type"] = text->family();
    // llava's own tie_word_embeddings governs the text model's head (LlavaConfig default false).
    DZ_ASSIGN_OR_RETURN(bool tie, json_bool_or(c, "tie_word_embeddings", false));
    tc["tie_word_embeddings"] = tie;
    auto th = text->parse_hparams(text_config_with_defaults(tc, text->family()));
    if (!th.ok()) return Status(th.status().code(), "text_config: " + th.status().message());
    HParams hp = std::move(*th);
    hp.family = family();
    hp.model_type = "llava";
    hp.raw = c;

    const nlohmann::json& v = c.contains("vision_config") && c["vision_config"].is_object() ? c["vision_config"] : empty;
    DZ_ASSIGN_OR_RETURN(std::string vmt, json_string_or(v, "model_type", "clip_vision_model"));
    if (vmt != "clip_vision_model")
      return Status::Unsupported("config.json: vision_config.model_type '" + vmt + "' is not supported (clip_vision_model)");
    VisionParams& vp = hp.vision;
    vp.enabled = true;
    // CLIPVisionConfig defaults.
    DZ_ASSIGN_OR_RETURN(vp.n_embd, json_int_or(v, "hidden_size", 768));
    DZ_ASSIGN_OR_RETURN(vp.n_ff, json_int_or(v, "intermediate_size", 3072));
    DZ_ASSIGN_OR_RETURN(vp.n_layer, json_int_or(v, "num_hidden_layers", 12));
    DZ_ASSIGN_OR_RETURN(vp.n_head, json_int_or(v, "num_attention_heads", 12));
    DZ_ASSIGN_OR_RETURN(vp.n_channels, json_int_or(v, "num_channels", 3));
    DZ_ASSIGN_OR_RETURN(vp.image_size, json_int_or(v, "image_size", 224));
    DZ_ASSIGN_OR_RETURN(vp.patch_size, json_int_or(v, "patch_size", 32));
    DZ_ASSIGN_OR_RETURN(vp.norm_eps, json_double_or(v, "layer_norm_eps", 1e-5));
    DZ_ASSIGN_OR_RETURN(std::string act, json_string_or(v, "hidden_act", "quick_gelu"));
    DZ_ASSIGN_OR_RETURN(vp.act, parse_act("vision_config.hidden_act", act));
    for (int64_t x : {vp.n_embd, vp.n_ff, vp.n_layer, vp.n_head, vp.n_channels, vp.image_size, vp.patch_size})
      if (x <= 0) return Status::InvalidArgument("config.json: vision_config sizes must be positive");
    if (vp.n_embd % vp.n_head != 0)
      return Status::InvalidArgument("config.json: vision_config.hidden_size " + std::to_string(vp.n_embd) +
                                     " is not a multiple of num_attention_heads " + std::to_string(vp.n_head));
    if (vp.image_size % vp.patch_size != 0)
      return Status::InvalidArgument("config.json: vision_config.image_size " + std::to_string(vp.image_size) +
                                     " is not a multiple of patch_size " + std::to_string(vp.patch_size));
    vp.class_token = true;
    vp.pre_norm = true;
    vp.pos_embed = VisionParams::PosEmbed::kLearned;
    vp.pos_h = vp.pos_w = vp.image_size / vp.patch_size;

    // LlavaConfig defaults.
    if (c.contains("vision_feature_layer") && c["vision_feature_layer"].is_array())
      return Status::Unsupported("config.json: key 'vision_feature_layer': a list (features of several layers "
                                 "concatenated) is not supported; give one layer");
    DZ_ASSIGN_OR_RETURN(int64_t feature_layer, json_int_or(c, "vision_feature_layer", -2));
    // hidden_states[0] is the embedding, [k] the output of k layers; negative counts from the end.
    const int64_t run = feature_layer >= 0 ? feature_layer : vp.n_layer + 1 + feature_layer;
    if (run < 0 || run > vp.n_layer)
      return Status::InvalidArgument("config.json: vision_feature_layer " + std::to_string(feature_layer) +
                                     " is outside the tower's " + std::to_string(vp.n_layer) + " layers");
    vp.n_layer_run = run;
    DZ_ASSIGN_OR_RETURN(std::string strategy, json_string_or(c, "vision_feature_select_strategy", "default"));
    if (strategy != "default" && strategy != "full")
      return Status::InvalidArgument("config.json: vision_feature_select_strategy '" + strategy +
                                     "' is not default or full");
    vp.drop_class_token = strategy == "default";
    DZ_ASSIGN_OR_RETURN(std::string pact, json_string_or(c, "projector_hidden_act", "gelu"));
    DZ_ASSIGN_OR_RETURN(vp.projector_act, parse_act("projector_hidden_act", pact));
    DZ_ASSIGN_OR_RETURN(bool proj_bias, json_bool_or(c, "multimodal_projector_bias", true));
    if (!proj_bias) return Status::Unsupported("config.json: multimodal_projector_bias false is not supported");
    vp.projector_hidden = hp.n_embd;
    DZ_ASSIGN_OR_RETURN(int64_t image_token, json_int_or(c, "image_token_index", 32000));
    vp.image_token_id = static_cast<int32_t>(image_token);
    return hp;
  }

  // The text model's layers (the tower runs outside the decoder layers).
  std::vector<LayerDesc> layer_kinds(const HParams& hp) const override { return text_of(hp).layer_kinds(hp); }

  std::vector<TensorSpec> tensor_specs(const HParams& hp) const override {
    std::vector<TensorSpec> s = text_of(hp).tensor_specs(hp);
    prefix_tensor_names(s, kLanguageModelPrefix);
    auto v = blocks::vision_specs(hp.vision, clip_names(), hp.n_embd);
    s.insert(s.end(), v.begin(), v.end());
    return s;
  }

  std::string embed_name() const override { return kLanguageModelPrefix + llama_adapter().embed_name(); }
  std::string final_norm_name() const override { return kLanguageModelPrefix + llama_adapter().final_norm_name(); }
  std::string lm_head_name(const HParams& hp) const override {
    return hp.tie_embeddings ? embed_name() : std::string(kLanguageModelPrefix) + "lm_head.weight";
  }

  void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const override {
    const Weights text_weights(ctx.w, kLanguageModelPrefix);
    LayerContext text = ctx.with_weights(text_weights);
    text_of(ctx.hp).forward_layer(text, layer, hidden);
  }

  Tensor image_features(backend::Backend& be, const HParams& hp, const Weights& w, const image::ProcessedImage& img,
                        ActivationSink* sink) const override {
    const blocks::VisionContext ctx{be, hp.vision, clip_names(), w, sink};
    return blocks::image_features(ctx, img);
  }

  nlohmann::json make_config(const ModelShape& s) const override {
    nlohmann::json text = llama_adapter().make_config(s);
    text.erase("architectures");
    // The tokenizer's <image> (make-model adds it), else the last id of the vocabulary.
    const int64_t image_token = s.image_token_id >= 0 ? s.image_token_id : s.n_vocab - 1;
    return {
        {"architectures", {"LlavaForConditionalGeneration"}},
        {"model_type", "llava"},
        {"image_token_index", image_token},
        {"projector_hidden_act", "gelu"},
        {"vision_feature_layer", -2},
        {"vision_feature_select_strategy", "default"},
        {"image_seq_length", 9},
        {"tie_word_embeddings", s.tie_embeddings},
        {"torch_dtype", s.torch_dtype},
        {"text_config", text},
        {"vision_config",
         {{"model_type", "clip_vision_model"},
          {"hidden_size", 32},
          {"intermediate_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"image_size", 42},
          {"patch_size", 14},
          {"hidden_act", "quick_gelu"},
          {"layer_norm_eps", 1e-5},
          {"projection_dim", 32}}},
    };
  }

  std::string image_placeholder_text() const override { return "<image>"; }

  nlohmann::json make_preprocessor_config(const nlohmann::json& config) const override {
    const int64_t size = config["vision_config"]["image_size"].get<int64_t>();
    return {
        {"image_processor_type", "CLIPImageProcessor"},
        {"processor_class", "LlavaProcessor"},
        {"do_resize", true},
        {"size", {{"shortest_edge", size}}},
        {"resample", 3},
        {"do_center_crop", true},
        {"crop_size", {{"height", size}, {"width", size}}},
        {"do_rescale", true},
        {"rescale_factor", 1.0 / 255.0},
        {"do_normalize", true},
        {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
        {"image_std", {0.26862954, 0.26130258, 0.27577711}},
        {"do_convert_rgb", true},
    };
  }

 private:
  static const Adapter& text_of(const HParams& hp) {
    auto a = text_adapter(hp.raw);
    DZ_CHECK(a.ok(), a.status().message());
    return **a;
  }
};

}  // namespace

const Adapter& llava_adapter() {
  static const LlavaAdapter kAdapter;
  return kAdapter;
}

}  // namespace dayzero::model
