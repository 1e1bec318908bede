// Shared config.json parsing for Llama-like decoders and RoPE frequency tables.
#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/json.h"

namespace dayzero::model {

namespace {

// The value of key in j; nullptr when j is not an object, the key is absent or its value null.
const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

Status wrong_type(const char* key, const char* want, const nlohmann::json& v) {
  return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be " + want + ", got " +
                                 json_kind(v) + " (" + json_excerpt(v) + ")");
}

bool is_int64(const nlohmann::json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
}

}  // namespace

Result<int64_t> json_int(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = field(j, key);
  if (!v) return Status::InvalidArgument(std::string("config.json: missing required key '") + key + "'");
  if (!is_int64(*v)) return wrong_type(key, "a positive integer", *v);
  const int64_t n = v->get<int64_t>();
  if (n <= 0) return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be positive, got " + std::to_string(n));
  return n;
}
Result<int64_t> json_int_or(const nlohmann::json& j, const char* key, int64_t fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!is_int64(*v)) return wrong_type(key, "an integer", *v);
  return v->get<int64_t>();
}
Result<double> json_double_or(const nlohmann::json& j, const char* key, double fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  return v->get<double>();
}
Result<bool> json_bool_or(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return wrong_type(key, "true or false", *v);
  return v->get<bool>();
}
Result<std::string> json_string_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_string()) return wrong_type(key, "a string", *v);
  return v->get<std::string>();
}
Result<std::vector<int64_t>> json_int_list_or_empty(const nlohmann::json& j, const char* key) {
  std::vector<int64_t> out;
  const nlohmann::json* v = field(j, key);
  if (!v) return out;
  if (!v->is_array()) return wrong_type(key, "a list of integers", *v);
  for (const auto& e : *v) {
    if (!is_int64(e)) return wrong_type(key, "a list of integers", e);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Status check_tensor_count(int64_t n_layer, int64_t n_expert, const std::string& where) {
  const double estimate = static_cast<double>(n_layer) * (16.0 + 3.0 * static_cast<double>(std::max<int64_t>(n_expert, 0)));
  if (estimate <= kMaxTensorSpecs) return Status::Ok();
  return Status::InvalidArgument(where + ": num_hidden_layers (" + std::to_string(n_layer) + ")" +
                                 (n_expert > 0 ? " with " + std::to_string(n_expert) + " experts per layer" : "") +
                                 " would declare about " + std::to_string(static_cast<int64_t>(estimate)) +
                                 " tensors, more than the " + std::to_string(static_cast<int64_t>(kMaxTensorSpecs)) +
                                 " any real model needs");
}

Status check_tensor_count(const HParams& hp) {
  return check_tensor_count(hp.n_layer + std::max<int64_t>(hp.n_nextn_layer, 0), hp.n_expert, "config.json");
}

Result<HParams> parse_llama_like(const nlohmann::json& c) {
  HParams hp;
  if (!c.is_object()) return Status::InvalidArgument(std::string("config.json: top level is ") + json_kind(c) + ", not an object");
  hp.raw = c;
  DZ_ASSIGN_OR_RETURN(hp.model_type, json_string_or(c, "model_type", ""));
  DZ_ASSIGN_OR_RETURN(hp.n_vocab, json_int(c, "vocab_size"));
  DZ_ASSIGN_OR_RETURN(hp.n_embd, json_int(c, "hidden_size"));
  DZ_ASSIGN_OR_RETURN(hp.n_layer, json_int(c, "num_hidden_layers"));
  DZ_ASSIGN_OR_RETURN(hp.n_head, json_int(c, "num_attention_heads"));
  DZ_ASSIGN_OR_RETURN(hp.n_ff, json_int(c, "intermediate_size"));
  DZ_ASSIGN_OR_RETURN(hp.n_head_kv, json_int_or(c, "num_key_value_heads", hp.n_head));
  DZ_ASSIGN_OR_RETURN(hp.head_dim, json_int_or(c, "head_dim", 0));
  if (hp.head_dim < 0) return Status::InvalidArgument("config.json: key 'head_dim' must be positive");
  if (hp.head_dim == 0) {
    if (hp.n_embd % hp.n_head != 0)
      return Status::InvalidArgument("config.json: hidden_size is not a multiple of num_attention_heads");
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return Status::InvalidArgument("config.json: num_attention_heads (" + std::to_string(hp.n_head) +
                                   ") is not a multiple of num_key_value_heads (" + std::to_string(hp.n_head_kv) + ")");
  if (hp.head_dim % 2 != 0) return Status::InvalidArgument("config.json: head_dim must be even for RoPE");
  DZ_ASSIGN_OR_RETURN(hp.max_position, json_int_or(c, "max_position_embeddings", 4096));
  DZ_ASSIGN_OR_RETURN(hp.rms_eps, json_double_or(c, "rms_norm_eps", 1e-6));
  DZ_ASSIGN_OR_RETURN(hp.rope_theta, json_double_or(c, "rope_theta", 10000.0));
  DZ_ASSIGN_OR_RETURN(hp.tie_embeddings, json_bool_or(c, "tie_word_embeddings", false));
  // Older configs carry rope_theta + rope_scaling; transformers 5 writes rope_parameters.
  const nlohmann::json* rs = nullptr;
  bool from_parameters = false;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    if (!it->is_object())
      return Status::InvalidArgument(std::string("config.json: key '") + key + "' must be an object, got " +
                                     json_kind(*it));
    rs = &*it;
    from_parameters = std::string(key) == "rope_parameters";
  }
  if (from_parameters) {
    DZ_ASSIGN_OR_RETURN(hp.rope_theta, json_double_or(*rs, "rope_theta", hp.rope_theta));
  }
  if (rs) {
    DZ_ASSIGN_OR_RETURN(hp.rope_scaling, parse_rope_scaling(*rs, "rope_scaling"));
  }
  return hp;
}

Result<RopeScaling> parse_rope_scaling(const nlohmann::json& rs, const std::string& where) {
  if (!rs.is_object()) return Status::InvalidArgument("config.json: key '" + where + "' must be an object");
  RopeScaling s;
  DZ_ASSIGN_OR_RETURN(const std::string legacy_type, json_string_or(rs, "type", "default"));
  DZ_ASSIGN_OR_RETURN(s.type, json_string_or(rs, "rope_type", legacy_type));
  DZ_ASSIGN_OR_RETURN(s.factor, json_double_or(rs, "factor", 1.0));
  DZ_ASSIGN_OR_RETURN(s.low_freq_factor, json_double_or(rs, "low_freq_factor", 1.0));
  DZ_ASSIGN_OR_RETURN(s.high_freq_factor, json_double_or(rs, "high_freq_factor", 4.0));
  DZ_ASSIGN_OR_RETURN(s.original_max_position_embeddings, json_int_or(rs, "original_max_position_embeddings", 8192));
  DZ_ASSIGN_OR_RETURN(s.beta_fast, json_double_or(rs, "beta_fast", 32.0));
  DZ_ASSIGN_OR_RETURN(s.beta_slow, json_double_or(rs, "beta_slow", 1.0));
  DZ_ASSIGN_OR_RETURN(s.mscale, json_double_or(rs, "mscale", 0.0));
  DZ_ASSIGN_OR_RETURN(s.mscale_all_dim, json_double_or(rs, "mscale_all_dim", 0.0));
  DZ_ASSIGN_OR_RETURN(s.attention_factor, json_double_or(rs, "attention_factor", 0.0));
  DZ_ASSIGN_OR_RETURN(s.truncate, json_bool_or(rs, "truncate", true));
  if (s.type != "default" && s.type != "llama3" && s.type != "linear" && s.type != "yarn")
    return Status::Unsupported("config.json: " + where + " type '" + s.type +
                               "' is not supported (supported: default, linear, llama3, yarn)");
  return s;
}

double yarn_get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

double rope_attention_factor(const RopeScaling& s) {
  if (s.type != "yarn") return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  if (s.mscale != 0 && s.mscale_all_dim != 0)
    return yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim);
  return yarn_get_mscale(s.factor, 1.0);
}

std::vector<float> rope_inv_freq(const HParams& hp) {
  const int64_t dim = hp.rope_dim > 0 ? hp.rope_dim : hp.head_dim;
  const int64_t half = dim / 2;
  std::vector<float> inv(half);
  const RopeScaling& s = hp.rope_scaling;
  // yarn: dimensions below `low` keep the original frequency, above `high` are interpolated
  // by 1/factor, with a linear ramp between (HF find_correction_range, truncated).
  double low = 0, high = 0;
  if (s.type == "yarn") {
    const double base = hp.rope_theta, orig = static_cast<double>(s.original_max_position_embeddings);
    const auto corr = [&](double rot) {
      return (static_cast<double>(dim) * std::log(orig / (rot * 2 * std::numbers::pi))) / (2 * std::log(base));
    };
    low = corr(s.beta_fast);
    high = corr(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
  }
  for (int64_t i = 0; i < half; ++i) {
    // HF computes base ** (2i / dim) in f32; the f32 result is what the checkpoint was trained with.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    double f = 1.0 / std::pow(static_cast<double>(static_cast<float>(hp.rope_theta)), static_cast<double>(exponent));
    if (s.type == "yarn") {
      // In f32 as HF: pos_freqs = base ** (2i/dim); interpolation = 1 / (factor * pos_freqs).
      const float pos_freq = std::pow(static_cast<float>(hp.rope_theta), exponent);
      const float extra = 1.0f / pos_freq, inter = 1.0f / (static_cast<float>(s.factor) * pos_freq);
      const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extra_factor = 1.0f - ramp;
      f = inter * (1.0f - extra_factor) + extra * extra_factor;
    } else if (s.type == "linear") {
      f /= s.factor;
    } else if (s.type == "llama3") {
      const double old_len = static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace dayzero::model
