// Hyper-parameters of a decoder-only transformer, parsed from config.json by the family's
// adapter. Only what the forward pass and the loader need; the raw JSON is kept for dumps.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <algorithm>
#include <vector>

#include "core/status.h"

namespace dayzero::model {

struct RopeScaling {
  std::string type = "default";  // default | llama3 | linear
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

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
  std::vector<int> dense_layers;  // layers with a dense MLP instead of experts
  nlohmann::json raw;          // config.json as read

  bool is_moe_layer(int layer) const {
    return n_expert > 0 && std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
  }
};

// RoPE inverse frequencies [head_dim / 2], including the llama3/linear scaling of HF's
// modeling_rope_utils.
std::vector<float> rope_inv_freq(const HParams& hp);

// Reads a required / optional field of config.json with a message naming the key.
Result<int64_t> json_int(const nlohmann::json& j, const char* key);
int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t fallback);
double json_double_or(const nlohmann::json& j, const char* key, double fallback);
bool json_bool_or(const nlohmann::json& j, const char* key, bool fallback);

// Fields shared by the Llama-like families (sizes, rope, eps, tied embeddings).
Result<HParams> parse_llama_like(const nlohmann::json& config);

}  // namespace dayzero::model
