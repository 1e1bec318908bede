// Hyper-parameters of a decoder-only transformer, parsed from config.json by the family's
// adapter. Only what the forward pass and the loader need; the raw JSON is kept for dumps.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include "core/check.h"
#include "core/status.h"
#include "model/layer_desc.h"

namespace dayzero::model {

struct RopeScaling {
  std::string type = "default";  // default | llama3 | linear | yarn
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // yarn (HF _compute_yarn_parameters): ramp bounds and the attention-scale corrections.
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;  // 0: absent
  double attention_factor = 0.0;              // 0: absent (derived from factor / mscale)
  bool truncate = true;
};

// yarn's magnitude correction 0.1 * m * ln(scale) + 1 (1 when scale <= 1), as HF's get_mscale.
double yarn_get_mscale(double scale, double m);
// The factor yarn multiplies cos/sin by (1 for other rope types).
double rope_attention_factor(const RopeScaling& s);
// A rope_scaling / rope_parameters object (`where` names it in errors): every key HF writes, with
// HF's defaults; a rope type no family here runs is refused.
Result<RopeScaling> parse_rope_scaling(const nlohmann::json& rs, const std::string& where);

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2); absent when kv_lora_rank is 0.
struct MlaParams {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;
  double softmax_scale = 0;  // qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under yarn
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// DeepSeek Sparse Attention's lightning indexer (deepseek_v32, glm_moe_dsa); absent when index_topk is 0.
struct DsaParams {
  int64_t index_topk = 0;      // keys kept per query
  int64_t index_n_heads = 0;   // indexer query heads
  int64_t index_head_dim = 0;  // indexer head size (its one key head too); the cache holds it per token
  // Rotary layout of the indexer's leading qk_rope_head_dim: rotate-half (deepseek_v32) or
  // interleaved pairs (glm_moe_dsa).
  bool rope_interleave = false;
  // [n_layer] or empty (every layer full): true where the layer has no indexer of its own and
  // reuses the previous layer's selection (glm_moe_dsa indexer_types "shared"); such a layer
  // has no indexer tensors and no indexer key cache.
  std::vector<bool> shared;
  bool has_indexer(int layer) const { return index_topk > 0 && !reuses_topk(layer); }
  bool reuses_topk(int layer) const { return reuses_index_selection(index_topk, shared, layer); }
};

// Gated DeltaNet linear attention (qwen3_next, qwen3_5_moe); absent when n_k_heads is 0. Which
// layers are linear comes from HParams::linear_layers.
struct LinearAttnParams {
  int64_t n_k_heads = 0, n_v_heads = 0;  // linear_num_key_heads / linear_num_value_heads (v a multiple of k)
  int64_t k_head_dim = 0, v_head_dim = 0;
  int64_t conv_kernel = 0;               // linear_conv_kernel_dim: the causal depthwise conv's taps
  int64_t v_per_k() const { return n_k_heads > 0 ? n_v_heads / n_k_heads : 0; }
  int64_t key_dim() const { return n_k_heads * k_head_dim; }
  int64_t value_dim() const { return n_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels of the conv: [q | k | v]
};

// Sigmoid routing with a selection bias and group-limited top-k (DeepSeek-V3 "noaux_tc").
struct GroupRouting {
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  int64_t n_shared_experts = 0;  // shared SwiGLU of n_shared_experts * n_ff_expert
};

// A vision tower and its projector into the text model (multimodal families; absent when
// enabled is false). Every option names a part of the shared core in model/blocks/vision.h,
// so a family picks its parts and its tensor names rather than adding a code path.
struct VisionParams {
  enum class PosEmbed { kNone, kLearned, kLearnedResampled };  // resampled: table [pos_h, pos_w, d] -> grid (bicubic)
  enum class Rope2d { kNone, kInterleaved };                   // interleaved: (w, h) per frequency (MoonViT)
  enum class Act { kGelu, kGeluTanh, kQuickGelu };
  bool enabled = false;
  int64_t image_size = 0, patch_size = 0, n_channels = 3;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_ff = 0;  // the tower's own sizes
  double norm_eps = 1e-5;                                  // every LayerNorm of the tower
  bool class_token = false;                                // CLIP: a learned [CLS] before the patches
  bool patch_bias = false;                                 // the patch conv has a bias
  PosEmbed pos_embed = PosEmbed::kLearned;
  int64_t pos_h = 0, pos_w = 0;                            // learned table grid (CLS row extra)
  Rope2d rope = Rope2d::kNone;
  double rope_theta = 10000.0;
  bool pre_norm = false;                                   // CLIP pre_layrnorm after the embeddings
  bool fused_qkv = false;
  Act act = Act::kQuickGelu;
  int64_t n_layer_run = 0;        // encoder layers run: the feature layer's hidden state
  bool drop_class_token = true;   // vision_feature_select_strategy "default"
  int64_t merge_kernel = 1;       // k x k patch merger (1: none)
  bool post_norm = false;         // run the post-norm on the tower's output (MoonViT's final_layernorm)
  double projector_norm_eps = 1e-5;
  bool projector_pre_norm = false;  // LayerNorm of each patch's n_embd features before the merge's concatenation
  Act projector_act = Act::kGelu;
  int64_t projector_hidden = 0;   // linear_1 output width
  int32_t image_token_id = -1;    // the placeholder the processor expands per image
};

// What only one kind of decoder's forward pass reads: one struct per kind, held in
// HParams::family_params by the adapter that parsed it. Layer-level facts that the planner,
// the memory model and the runtime need (which layers are linear, which keep an indexer key)
// reach them through the adapter's layer descriptors (model/layer_desc.h), not through these.
//
// DeepSeek-V3-style decoders: MLA attention, sigmoid group routing with shared experts, and
// (deepseek_v32, glm_moe_dsa) the sparse-attention indexer (index_topk 0: none). deepseek_v3,
// deepseek_v32, glm_moe_dsa and kimi_k25's text model.
struct DeepSeekParams {
  MlaParams mla;
  GroupRouting routing;
  DsaParams dsa;
};
// Hybrid decoders of Gated DeltaNet and gated full attention (qwen3_next, qwen3_5_moe).
struct HybridLinearParams {
  LinearAttnParams linear;
  std::vector<int> linear_layers;  // layers whose token mixer is Gated DeltaNet (layer_types "linear_attention")
  // Shared expert next to the routed ones, scaled per token by sigmoid(shared_expert_gate . x).
  int64_t n_ff_shared_gated = 0;
  bool attn_output_gate = false;   // q_proj also yields a per-head gate: attention * sigmoid(gate)
  bool is_linear_layer(int layer) const {
    return std::find(linear_layers.begin(), linear_layers.end(), layer) != linear_layers.end();
  }
};
// DeepSeek-V4 (deepseek_v4): mHC residual streams, hybrid sliding / compressed attention with one
// shared K=V head, the grouped output projection, sqrtsoftplus and hash-routed experts.
enum class V4Attention { kSliding, kCompressedSparse, kHeavilyCompressed };  // layer_types values
struct DeepseekV4Params {
  int64_t hc_mult = 0;            // residual streams (mHC)
  int64_t hc_sinkhorn_iters = 0;  // Sinkhorn-Knopp iterations of the comb matrix
  double hc_eps = 0;
  int64_t q_lora_rank = 0;
  int64_t rope_dim = 0;           // head_dim * partial_rotary_factor: the trailing rotated slice
  double compress_rope_theta = 0; // rope base of CSA / HCA layers (with rope_scaling when yarn)
  int64_t sliding_window = 0;
  int64_t csa_rate = 0, hca_rate = 0;  // compress_rates
  int64_t o_groups = 0, o_lora_rank = 0;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  std::string scoring_func;       // sqrtsoftplus | softmax | sigmoid
  double routed_scaling_factor = 1.0;
  int64_t n_shared_experts = 0;
  bool fp4_experts = false;       // quantization_config expert_dtype fp4: routed experts MXFP4 in place
  std::vector<V4Attention> layer_types;  // [n_layer]
  std::vector<bool> hash_moe;            // [n_layer]: expert choice from tid2eid[input_ids]
  int64_t compress_rate(int layer) const {
    const V4Attention t = layer_types[layer];
    return t == V4Attention::kCompressedSparse ? csa_rate : t == V4Attention::kHeavilyCompressed ? hca_rate : 0;
  }
};
// monostate: the Llama-like families (llama, qwen2, qwen3, mixtral, qwen3_moe, llava's text
// model), whose forward pass needs nothing beyond HParams' common fields.
using FamilyParams = std::variant<std::monostate, DeepSeekParams, HybridLinearParams, DeepseekV4Params>;

struct HParams {
  std::string family;      // adapter name, e.g. "llama"
  std::string model_type;  // as written in config.json
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t max_position = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool attn_qkv_bias = false;  // q/k/v projections carry a bias (qwen2, llama attention_bias)
  bool attn_out_bias = false;  // o projection carries a bias (llama attention_bias)
  bool mlp_bias = false;
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (qwen3)
  // Mixture of experts (0 experts: dense).
  int64_t n_expert = 0;           // routed experts per MoE layer
  int64_t n_expert_used = 0;      // top-k
  int64_t n_ff_expert = 0;        // intermediate size of one expert
  bool norm_topk_prob = true;     // renormalise the top-k probabilities to sum to 1
  // SwiGLU of the experts and shared expert with gate clamped above at the limit and up to
  // [-limit, limit] before silu(gate) * up (DeepSeek-V4); 0: no clamp.
  double swiglu_limit = 0;
  std::vector<int> dense_layers;  // layers with a dense MLP instead of experts
  bool norm_weight_offset = false;  // every RMSNorm scales by (1 + w), Gemma-style (qwen3_next)
  // Rotary dimensions when not head_dim (MLA rotates qk_rope_head_dim of each head): the
  // size of rope_inv_freq is rope_dim / 2.
  int64_t rope_dim = 0;
  int64_t n_nextn_layer = 0;  // multi-token-prediction layers after n_layer (declared, not run)
  int64_t quant_block_rows = 0, quant_block_cols = 0;  // FP8 block size (0: not quantized)
  bool quant_scale_ue8m0 = false;  // the FP8 block scales are UE8M0 tensors (F8_E8M0; DeepSeek-V4's `.scale`)
  VisionParams vision;         // multimodal families only
  FamilyParams family_params;  // the family's own part (monostate: none)
  nlohmann::json raw;          // config.json as read

  // The family's own part; DZ_CHECK-fails when the adapter parsed another kind (a block used by
  // a family it was not written for).
  const DeepSeekParams& deepseek() const { return part<DeepSeekParams>("DeepSeek-style"); }
  DeepSeekParams& deepseek() { return const_cast<DeepSeekParams&>(std::as_const(*this).deepseek()); }
  const HybridLinearParams& hybrid() const { return part<HybridLinearParams>("hybrid linear-attention"); }
  HybridLinearParams& hybrid() { return const_cast<HybridLinearParams&>(std::as_const(*this).hybrid()); }
  const DeepseekV4Params& deepseek_v4() const { return part<DeepseekV4Params>("DeepSeek-V4"); }
  DeepseekV4Params& deepseek_v4() { return const_cast<DeepseekV4Params&>(std::as_const(*this).deepseek_v4()); }
  bool is_moe_layer(int layer) const {
    return n_expert > 0 && std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
  }

 private:
  template <class T>
  const T& part(const char* kind) const {
    const T* p = std::get_if<T>(&family_params);
    DZ_CHECK(p, "family " << family << " has no " << kind << " hyper-parameters");
    return *p;
  }
};

// RoPE inverse frequencies [rope_dim / 2] (rope_dim 0: head_dim), including the
// llama3/linear/yarn scaling of HF's modeling_rope_utils.
std::vector<float> rope_inv_freq(const HParams& hp);

// Reads a field of config.json (j: the object holding it) with a message naming the key.
// json_int: required and positive; InvalidArgument when missing, null, not an integer or <= 0.
// json_*_or: the fallback when the key is absent or null (as transformers reads None); a key
// present with another type is InvalidArgument ("config.json: key 'k' must be ..., got a
// string"), never the fallback. An integer is accepted where a double is wanted.
Result<int64_t> json_int(const nlohmann::json& j, const char* key);
Result<int64_t> json_int_or(const nlohmann::json& j, const char* key, int64_t fallback);
Result<double> json_double_or(const nlohmann::json& j, const char* key, double fallback);
Result<bool> json_bool_or(const nlohmann::json& j, const char* key, bool fallback);
Result<std::string> json_string_or(const nlohmann::json& j, const char* key, const std::string& fallback);
// An optional list of integers (absent or null: empty).
Result<std::vector<int64_t>> json_int_list_or_empty(const nlohmann::json& j, const char* key);

// Refuses sizes that would make the tensor list itself absurd: more than kMaxTensorSpecs
// tensors, estimated from the layer and expert counts (a layer declares ~16 tensors and 3 per
// routed expert; Kimi-K2, 61 layers of 384 experts, lists ~71k). Without it a hostile
// config.json ("num_hidden_layers": 100000000) makes inspect and plan build billions of specs.
// Call after parse_hparams, before tensor_specs. InvalidArgument naming the keys.
inline constexpr double kMaxTensorSpecs = 2e6;
Status check_tensor_count(const HParams& hp);
// The same bound from the raw counts (the generic analysis, which has no HParams); `where`
// prefixes the message, e.g. "config.json text_config".
Status check_tensor_count(int64_t n_layer, int64_t n_expert, const std::string& where);

// Fields shared by the Llama-like families (sizes, rope, eps, tied embeddings).
Result<HParams> parse_llama_like(const nlohmann::json& config);

}  // namespace dayzero::model
