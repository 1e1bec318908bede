// The runtime's forward pass against a straightforward implementation written here: its own
// safetensors parsing, double-precision loops, recomputation without a KV cache. It shares no
// code with the runtime, so an error in a kernel, a block or the loader cannot cancel out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "naive_reference.h"
#include "reference_check.h"

namespace dayzero {
namespace {
namespace fs = std::filesystem;
using naive::Mat;
using naive::read_f32_safetensors;


struct NaiveModel {
  nlohmann::json cfg;
  std::map<std::string, Mat> w;
  int64_t d, n_layer, n_head, n_kv, hd, ff, vocab;
  double eps, theta;
  bool qk_norm, qkv_bias, tied;
  std::vector<double> inv_freq;  // [hd / 2]

  const Mat& W(const std::string& n) const {
    auto it = w.find(n);
    if (it == w.end()) throw std::runtime_error("missing " + n);
    return it->second;
  }
  // y[t, out] = sum_i x[t, i] * w[out, i]
  static Mat linear(const Mat& x, const Mat& wt, int64_t in, int64_t out) {
    const int64_t n = static_cast<int64_t>(x.size()) / in;
    Mat y(n * out, 0.0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += x[t * in + i] * wt[o * in + i];
        y[t * out + o] = s;
      }
    return y;
  }
  static void rmsnorm(Mat& x, const Mat& g, int64_t width, double eps) {
    for (size_t r = 0; r < x.size() / width; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < width; ++i) ss += x[r * width + i] * x[r * width + i];
      const double inv = 1.0 / std::sqrt(ss / width + eps);
      for (int64_t i = 0; i < width; ++i) x[r * width + i] *= inv * g[i];
    }
  }
  void rope(Mat& x, int64_t n_tokens, int64_t heads) const {
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double freq = inv_freq[i];
          const double c = std::cos(t * freq), s = std::sin(t * freq);
          double& a = x[(t * heads + h) * hd + i];
          double& b = x[(t * heads + h) * hd + i + hd / 2];
          const double a0 = a, b0 = b;
          a = a0 * c - b0 * s;
          b = b0 * c + a0 * s;
        }
  }

  // logits [n_tokens, vocab] for the whole sequence, causal, no cache.
  Mat forward(const std::vector<int32_t>& ids) const {
    const int64_t n = static_cast<int64_t>(ids.size());
    Mat h(n * d);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i) h[t * d + i] = W("model.embed_tokens.weight")[ids[t] * d + i];
    for (int64_t l = 0; l < n_layer; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Mat x = h;
      rmsnorm(x, W(p + "input_layernorm.weight"), d, eps);
      Mat q = linear(x, W(p + "self_attn.q_proj.weight"), d, n_head * hd);
      Mat k = linear(x, W(p + "self_attn.k_proj.weight"), d, n_kv * hd);
      Mat v = linear(x, W(p + "self_attn.v_proj.weight"), d, n_kv * hd);
      if (qkv_bias)
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t i = 0; i < n_head * hd; ++i) q[t * n_head * hd + i] += W(p + "self_attn.q_proj.bias")[i];
          for (int64_t i = 0; i < n_kv * hd; ++i) k[t * n_kv * hd + i] += W(p + "self_attn.k_proj.bias")[i];
          for (int64_t i = 0; i < n_kv * hd; ++i) v[t * n_kv * hd + i] += W(p + "self_attn.v_proj.bias")[i];
        }
      if (qk_norm) {
        rmsnorm(q, W(p + "self_attn.q_norm.weight"), hd, eps);
        rmsnorm(k, W(p + "self_attn.k_norm.weight"), hd, eps);
      }
      rope(q, n, n_head);
      rope(k, n, n_kv);
      Mat att(n * n_head * hd, 0.0);
      for (int64_t hh = 0; hh < n_head; ++hh) {
        const int64_t kvh = hh / (n_head / n_kv);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<double> s(t + 1);
          double mx = -1e300;
          for (int64_t u = 0; u <= t; ++u) {
            double dot = 0;
            for (int64_t i = 0; i < hd; ++i) dot += q[(t * n_head + hh) * hd + i] * k[(u * n_kv + kvh) * hd + i];
            s[u] = dot / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, s[u]);
          }
          double z = 0;
          for (auto& e : s) z += (e = std::exp(e - mx));
          for (int64_t u = 0; u <= t; ++u)
            for (int64_t i = 0; i < hd; ++i) att[(t * n_head + hh) * hd + i] += s[u] / z * v[(u * n_kv + kvh) * hd + i];
        }
      }
      Mat o = linear(att, W(p + "self_attn.o_proj.weight"), n_head * hd, d);
      for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
      x = h;
      rmsnorm(x, W(p + "post_attention_layernorm.weight"), d, eps);
      Mat g = linear(x, W(p + "mlp.gate_proj.weight"), d, ff);
      Mat u = linear(x, W(p + "mlp.up_proj.weight"), d, ff);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Mat down = linear(g, W(p + "mlp.down_proj.weight"), ff, d);
      for (size_t i = 0; i < h.size(); ++i) h[i] += down[i];
    }
    rmsnorm(h, W("model.norm.weight"), d, eps);
    return linear(h, W(tied ? "model.embed_tokens.weight" : "lm_head.weight"), d, vocab);
  }
};

NaiveModel load_naive(const fs::path& dir) {
  NaiveModel m;
  std::ifstream f(dir / "config.json");
  m.cfg = nlohmann::json::parse(f);
  m.w = read_f32_safetensors(dir / "model.safetensors");
  m.d = m.cfg["hidden_size"];
  m.n_layer = m.cfg["num_hidden_layers"];
  m.n_head = m.cfg["num_attention_heads"];
  m.n_kv = m.cfg["num_key_value_heads"];
  m.hd = m.cfg["head_dim"];
  m.ff = m.cfg["intermediate_size"];
  m.vocab = m.cfg["vocab_size"];
  m.eps = m.cfg["rms_norm_eps"];
  m.theta = m.cfg["rope_theta"];
  m.tied = m.cfg["tie_word_embeddings"];
  m.qk_norm = m.cfg["model_type"] == "qwen3";
  m.qkv_bias = m.cfg["model_type"] == "qwen2";
  // modeling_rope_utils.py: default, or _compute_llama3_parameters (long wavelengths divided
  // by factor, short ones kept, a smooth blend between).
  for (int64_t i = 0; i < m.hd / 2; ++i) m.inv_freq.push_back(1.0 / std::pow(m.theta, 2.0 * i / m.hd));
  if (m.cfg.contains("rope_scaling") && m.cfg["rope_scaling"].is_object() &&
      m.cfg["rope_scaling"].value("rope_type", "") == "llama3") {
    const auto& rs = m.cfg["rope_scaling"];
    const double factor = rs["factor"], lo = rs["low_freq_factor"], hi = rs["high_freq_factor"];
    const double old_len = rs["original_max_position_embeddings"];
    for (double& f : m.inv_freq) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen > old_len / lo) {
        f /= factor;
      } else if (wavelen >= old_len / hi) {
        const double smooth = (old_len / wavelen - lo) / (hi - lo);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
  }
  return m;
}


constexpr uint64_t kSeed = 99;

struct Case {
  const char* name;
  const char* family;
  nlohmann::json overrides;  // config.json keys set before the tensors are generated
  double tol;
  naive::FeatureControl feature_off;
};

// Tolerance 8e-7 on every position's logits: f32 runtime against f64 loops over 2 layers
// (the runtime also takes RoPE frequencies in f32, as transformers does) agree to at most
// 2.5e-7 (llama, qwen2, qwen3) and 3.2e-7 (llama3 scaling), measured; the negative controls
// (tenfold rms_norm_eps: >= 6.9e-5, rope_theta x1.01: >= 4.5e-4) land far above it.
constexpr double kTol = 8e-7;
const Case kCases[] = {
    {"llama", "llama", nlohmann::json::object(), kTol, {}},
    {"qwen2", "qwen2", nlohmann::json::object(), kTol, {}},
    {"qwen3", "qwen3", nlohmann::json::object(), kTol, {}},
    // llama3 scaling over an original 64 positions: head_dim 16's wavelengths 6..20000 fall in
    // all three bands (kept, blended, divided by factor).
    {"llama_rope_llama3", "llama",
     {{"rope_scaling",
       {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 64}}}},
     kTol,
     {"llama3 scaling read as default RoPE", [](model::HParams& hp) { hp.rope_scaling = model::RopeScaling{}; }}},
};

class ReferenceForward : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceForward, LogitsMatchNaiveLoops) {
  const Case& c = GetParam();
  const std::string family = c.family;
  const fs::path dir = fs::temp_directory_path() / ("dayzero-ref-" + std::string(c.name) + "-" + std::to_string(getpid()));
  tools::MakeModelOptions o;
  o.family = family;
  o.out_dir = dir.string();
  o.dtype = DType::kF32;
  o.seed = kSeed;
  o.shape = {.n_vocab = 300, .n_embd = 48, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ff = 96};
  o.shape.tie_embeddings = family == "qwen2";
  o.config_overrides = c.overrides;
  ASSERT_TRUE(tools::make_model(o).ok());

  const NaiveModel ref = load_naive(dir);
  const Mat expected = ref.forward(naive::kIds);
  naive::expect_within(c.name, naive::measure(naive::runtime_logits(dir), expected, ref.vocab), c.tol, kSeed);

  // Negative controls: the same comparison with a deliberately wrong hyper-parameter in the runtime.
  naive::expect_control_fails(std::string(c.name) + " with rms_norm_eps x10",
                              naive::measure(naive::runtime_logits(dir, [](model::HParams& hp) { hp.rms_eps *= 10; }),
                                             expected, ref.vocab),
                              c.tol, kSeed);
  naive::expect_control_fails(
      std::string(c.name) + " with rope_theta x1.01",
      naive::measure(naive::runtime_logits(dir, [](model::HParams& hp) { hp.rope_theta *= 1.01; }), expected,
                     ref.vocab),
      c.tol, kSeed);
  if (c.feature_off.what)
    naive::expect_control_fails(std::string(c.name) + " with " + c.feature_off.what,
                                naive::measure(naive::runtime_logits(dir, c.feature_off.perturb), expected, ref.vocab),
                                c.tol, kSeed);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceForward, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace dayzero
