// What a family's modeling code fixes and its config keys do not say (analysis.h TextDims): the
// MLP's form, which norms and biases exist, a shared expert every MoE layer has, a dense FFN
// size of its own. One entry per text model_type, each read from transformers 5.x
// models/<family>/modeling_<family>.py; a model_type without an entry is read as llama's layout
// (gated MLP, RMSNorm without bias, two norms per layer).
#include "analysis/analysis.h"
#include "model/hparams.h"

namespace dayzero::analysis {

Status apply_layout(const nlohmann::json& t, TextDims& x, KeyOrigins& origins) {
  const std::string& m = x.model_type;
  const auto derived = [&](const char* key, int64_t v, const std::string& why) {
    origins[key] = {KeyFrom::kDerived, why, v};
  };
  if (m == "bloom") {
    // BloomBlock: LayerNorm (with bias) before attention and MLP; query_key_value and dense with
    // biases; BloomMLP dense_h_to_4h / dense_4h_to_h (GELU, biases, 4 x hidden, no key);
    // word_embeddings_layernorm after the embedding; the head tied to the embedding.
    x.gated_mlp = false;
    x.norm_bias = x.embed_norm = x.attn_qkv_bias = x.attn_o_bias = x.mlp_bias = true;
    if (x.ff <= 0) {
      x.ff = 4 * x.hidden;
      derived("intermediate_size", x.ff, "intermediate_size = 4 * hidden_size (BloomMLP has no key)");
    }
  } else if (m == "falcon" || m == "RefinedWebModel" || m == "RefinedWeb") {  // the last two: Falcon's remote code
    // FalconAttention: query_key_value [(heads + 2 x kv) x head_dim, hidden] and dense, biases
    // as `bias` says; kv = num_kv_heads with new_decoder_architecture or without multi_query,
    // else 1. FalconMLP: dense_h_to_4h / dense_4h_to_h of ffn_hidden_size (4 x hidden when
    // absent), GELU, biases as `bias`. FalconDecoderLayer: LayerNorm; with parallel_attn one
    // norm before both branches unless num_ln_in_parallel_attn is 2 (new_decoder_architecture's
    // default: ln_attn and ln_mlp), without it llama's two.
    DZ_ASSIGN_OR_RETURN(bool new_arch, model::json_bool_or(t, "new_decoder_architecture", false));
    DZ_ASSIGN_OR_RETURN(bool multi_query, model::json_bool_or(t, "multi_query", true));
    DZ_ASSIGN_OR_RETURN(bool parallel, model::json_bool_or(t, "parallel_attn", true));
    DZ_ASSIGN_OR_RETURN(bool bias, model::json_bool_or(t, "bias", false));
    DZ_ASSIGN_OR_RETURN(int64_t kv_rw, model::json_int_or(t, "n_head_kv", x.n_head));  // remote code's name
    DZ_ASSIGN_OR_RETURN(int64_t kv, model::json_int_or(t, "num_kv_heads", kv_rw));
    DZ_ASSIGN_OR_RETURN(int64_t ln, model::json_int_or(t, "num_ln_in_parallel_attn", new_arch ? 2 : 1));
    DZ_ASSIGN_OR_RETURN(int64_t ffn, model::json_int_or(t, "ffn_hidden_size", 4 * x.hidden));
    x.n_head_kv = new_arch || !multi_query ? kv : 1;
    derived("num_key_value_heads", x.n_head_kv,
            new_arch || !multi_query ? "num_key_value_heads = num_kv_heads (FalconAttention)"
                                     : "num_key_value_heads = 1 (multi_query, FalconAttention)");
    x.ff = ffn;
    derived("intermediate_size", x.ff, "intermediate_size = ffn_hidden_size (FalconMLP; 4 x hidden_size when absent)");
    x.gated_mlp = false;
    x.norm_bias = true;
    x.attn_qkv_bias = x.attn_o_bias = x.mlp_bias = bias;
    x.single_norm = parallel && ln != 2;
  } else if (m == "gemma2" || m == "gemma3_text") {
    // Gemma2/3DecoderLayer: pre_feedforward_layernorm and post_feedforward_layernorm beside the
    // two of llama; Gemma3Attention always has q_norm and k_norm.
    x.sandwich_norms = true;
    if (m == "gemma3_text") x.qk_norm = true;
  } else if (m == "llama4_text") {
    // Llama4TextMoe: routed experts of intermediate_size and one shared expert of the same size
    // on the MoE layers; Llama4TextMLP of intermediate_size_mlp on the others; use_qk_norm is an
    // L2 norm without weights.
    DZ_ASSIGN_OR_RETURN(int64_t dense_ff, model::json_int_or(t, "intermediate_size_mlp", 0));
    if (x.n_expert > 0) {
      x.moe_ff = x.ff;
      x.n_shared = 1;
      derived("moe_intermediate_size", x.moe_ff, "moe_intermediate_size = intermediate_size (Llama4TextMoe)");
      derived("n_shared_experts", 1, "n_shared_experts = 1 (Llama4TextMoe has one shared expert)");
    }
    if (dense_ff > 0) x.ff = dense_ff;
    x.qk_norm = false;
  } else if (m == "phimoe") {
    // PhimoeDecoderLayer and PhimoeModel use nn.LayerNorm (weight and bias) for every norm.
    x.norm_bias = true;
  } else if (m == "qwen") {
    // Remote code, not in transformers (modeling_qwen.py of the Qwen-7B/14B/72B releases):
    // QWenMLP's w1 and w2 are intermediate_size // 2 wide; c_attn (fused q, k, v) always has a
    // bias, c_proj has none (no_bias); wte and lm_head are padded_vocab_size long; kv_channels is
    // the head size.
    if (x.ff > 0) {
      x.ff = x.ff / 2;
      derived("intermediate_size", x.ff, "QWenMLP width = intermediate_size // 2 (modeling_qwen.py)");
    }
    x.attn_qkv_bias = true;
    DZ_ASSIGN_OR_RETURN(int64_t padded, model::json_int_or(t, "padded_vocab_size", 0));
    if (padded > 0) x.vocab = padded;
    DZ_ASSIGN_OR_RETURN(int64_t kv_channels, model::json_int_or(t, "kv_channels", 0));
    if (kv_channels > 0) {
      x.head_dim = kv_channels;
      derived("head_dim", x.head_dim, "head_dim = kv_channels (modeling_qwen.py)");
    }
    if (!t.contains("num_key_value_heads")) {  // QWenAttention: every head has its own k and v
      x.n_head_kv = x.n_head;
      derived("num_key_value_heads", x.n_head_kv, "num_key_value_heads = num_attention_heads (QWenAttention)");
    }
  } else if (m == "mimo") {
    // Remote code (modeling_mimo.py of MiMo-7B): Qwen2's layout (q/k/v biases, none on o_proj);
    // each MTP layer is a decoder
    // layer with token_layernorm, hidden_layernorm, input_proj [hidden, 2 x hidden] and
    // final_layernorm, sharing the model's embedding and head.
    x.mtp_own_embedding = false;
    x.attn_o_bias = false;  // attention_bias is Qwen2's q/k/v bias; o_proj has none
  } else if (m == "granitemoe") {
    // GraniteMoeMoE: input_linear [E, 2 x intermediate_size, hidden] (gate and up fused),
    // output_linear [E, hidden, intermediate_size]: the experts are intermediate_size wide.
    if (x.n_expert > 0) derived("moe_intermediate_size", x.moe_ff, "moe_intermediate_size = intermediate_size (GraniteMoeMoE)");
  }
  return Status::Ok();
}

}  // namespace dayzero::analysis
