// The runtime's forward pass against a straightforward implementation written here: its own
// safetensors parsing, double-precision loops, recomputation without a KV cache. It shares no
// code with the runtime, so an error in a kernel, a block or the loader cannot cancel out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "model/make_model.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"
#include "naive_reference.h"

namespace dayzero {
namespace {
namespace fs = std::filesystem;
using naive::Mat;
using naive::read_f32_safetensors;
using naive::rel_l2;


struct NaiveModel {
  nlohmann::json cfg;
  std::map<std::string, Mat> w;
  int64_t d, n_layer, n_head, n_kv, hd, ff, vocab;
  double eps, theta;
  bool qk_norm, qkv_bias, tied;

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
          const double freq = 1.0 / std::pow(theta, 2.0 * i / hd);
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
  return m;
}


class ReferenceForward : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceForward, LogitsMatchNaiveLoops) {
  const std::string family = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("dayzero-ref-" + family + "-" + std::to_string(getpid()));
  model::MakeModelOptions o;
  o.family = family;
  o.out_dir = dir.string();
  o.dtype = DType::kF32;
  o.seed = 99;
  o.shape = {.n_vocab = 300, .n_embd = 48, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ff = 96};
  o.shape.tie_embeddings = family == "qwen2";
  ASSERT_TRUE(model::make_model(o).ok());

  auto info = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
  ASSERT_TRUE(info.ok()) << info.status().message();
  ASSERT_TRUE(runtime::check_tensors(*info).ok());
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  ASSERT_TRUE(runtime::load_weights(*info, **be, w, recs).ok());
  runtime::Forward fwd(**be, *info->adapter, info->hp, w);

  const std::vector<int32_t> ids = {5, 17, 255, 3, 42, 42, 7, 100, 299, 0, 11};
  // Prefill of the first 7 tokens, then one token at a time: exercises the cache path too.
  runtime::KvCache cache = fwd.new_cache(static_cast<int64_t>(ids.size()));
  Tensor first = fwd.run(std::span(ids).first(7), 0, cache, nullptr, true);
  std::vector<float> ours(first.f32(), first.f32() + first.numel());
  for (size_t t = 7; t < ids.size(); ++t) {
    Tensor step = fwd.run(std::span(ids).subspan(t, 1), static_cast<int64_t>(t), cache, nullptr, false);
    ours.insert(ours.end(), step.f32(), step.f32() + step.numel());
  }

  const NaiveModel ref = load_naive(dir);
  const Mat expected = ref.forward(ids);
  ASSERT_EQ(expected.size(), ours.size());
  const int64_t vocab = ref.vocab;
  for (size_t t = 0; t < ids.size(); ++t) {
    // f32 compute against f64 loops: errors of a few ulps per op over 2 layers stay far below 1e-5.
    const double err = rel_l2(ours.data() + t * vocab, expected.data() + t * vocab, vocab);
    EXPECT_LT(err, 1e-5) << family << " position " << t << " seed 99";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceForward, ::testing::Values("llama", "qwen2", "qwen3"));

}  // namespace
}  // namespace dayzero
