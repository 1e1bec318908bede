// The runtime's forward pass for the MoE and MLA families against straightforward
// implementations written here: mixtral (softmax top-k router, SwiGLU experts) and deepseek_v3
// (MLA attention with YaRN RoPE, sigmoid group-limited router, shared experts, dense first
// layer), following transformers' modeling_mixtral.py / modeling_deepseek_v3.py. Own
// safetensors parsing, double-precision loops, recomputation without a KV cache, no code
// shared with the runtime.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

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

constexpr uint64_t kSeed = 77;


struct Naive {
  nlohmann::json cfg;
  std::map<std::string, Mat> w;
  int64_t d = 0, n_layer = 0, n_head = 0, vocab = 0;
  double eps = 0, theta = 0;

  const Mat& W(const std::string& n) const {
    auto it = w.find(n);
    if (it == w.end()) throw std::runtime_error("missing " + n);
    return it->second;
  }
  // y[t, out] = sum_i x[t, i] * w[out, i]; out is taken from the weight's size.
  static Mat linear(const Mat& x, const Mat& wt, int64_t in) {
    const int64_t n = static_cast<int64_t>(x.size()) / in, out = static_cast<int64_t>(wt.size()) / in;
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
  // down(silu(gate x) * up x) for rows x of width d.
  Mat swiglu(const Mat& x, const std::string& gate, const std::string& up, const std::string& down) const {
    Mat g = linear(x, W(gate), d);
    const Mat u = linear(x, W(up), d);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return linear(g, W(down), static_cast<int64_t>(g.size() / (x.size() / d)));
  }
  // Causal softmax attention; q [n, heads, qk], k [n, kv_heads, qk], v [n, kv_heads, vd].
  static Mat attention(const Mat& q, const Mat& k, const Mat& v, int64_t n, int64_t heads, int64_t kv_heads,
                       int64_t qk, int64_t vd, double scale) {
    Mat att(n * heads * vd, 0.0);
    for (int64_t hh = 0; hh < heads; ++hh) {
      const int64_t kvh = hh / (heads / kv_heads);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < qk; ++i) dot += q[(t * heads + hh) * qk + i] * k[(u * kv_heads + kvh) * qk + i];
          s[u] = dot * scale;
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < vd; ++i) att[(t * heads + hh) * vd + i] += s[u] / z * v[(u * kv_heads + kvh) * vd + i];
      }
    }
    return att;
  }
  // Indices of the k largest values (stable on ties: lower index first).
  static std::vector<int64_t> topk(const std::vector<double>& s, int64_t k) {
    std::vector<int64_t> idx(s.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    idx.resize(k);
    return idx;
  }
  Mat embed(const std::vector<int32_t>& ids) const {
    Mat h(ids.size() * d);
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t i = 0; i < d; ++i) h[t * d + i] = W("model.embed_tokens.weight")[ids[t] * d + i];
    return h;
  }
  Mat head(Mat h) const {
    rmsnorm(h, W("model.norm.weight"), d, eps);
    return linear(h, W(cfg["tie_word_embeddings"] ? "model.embed_tokens.weight" : "lm_head.weight"), d);
  }
};

Naive load_naive(const fs::path& dir) {
  Naive m;
  std::ifstream f(dir / "config.json");
  m.cfg = nlohmann::json::parse(f);
  m.w = read_f32_safetensors(dir / "model.safetensors");
  m.d = m.cfg["hidden_size"];
  m.n_layer = m.cfg["num_hidden_layers"];
  m.n_head = m.cfg["num_attention_heads"];
  m.vocab = m.cfg["vocab_size"];
  m.eps = m.cfg["rms_norm_eps"];
  m.theta = m.cfg["rope_theta"];
  return m;
}

// modeling_mixtral.py: llama attention (GQA, rotate_half RoPE), MixtralSparseMoeBlock.
Mat mixtral_forward(const Naive& m, const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), d = m.d, nh = m.n_head;
  const int64_t nkv = m.cfg["num_key_value_heads"], hd = m.cfg["head_dim"];
  const int64_t n_exp = m.cfg["num_local_experts"], top_k = m.cfg["num_experts_per_tok"];
  auto rope = [&](Mat& x, int64_t heads) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double freq = 1.0 / std::pow(m.theta, 2.0 * i / hd);
          const double c = std::cos(t * freq), s = std::sin(t * freq);
          double& a = x[(t * heads + h) * hd + i];
          double& b = x[(t * heads + h) * hd + i + hd / 2];
          const double a0 = a, b0 = b;
          a = a0 * c - b0 * s;
          b = b0 * c + a0 * s;
        }
  };
  Mat h = m.embed(ids);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Mat x = h;
    Naive::rmsnorm(x, m.W(p + "input_layernorm.weight"), d, m.eps);
    Mat q = Naive::linear(x, m.W(p + "self_attn.q_proj.weight"), d);
    Mat k = Naive::linear(x, m.W(p + "self_attn.k_proj.weight"), d);
    const Mat v = Naive::linear(x, m.W(p + "self_attn.v_proj.weight"), d);
    rope(q, nh);
    rope(k, nkv);
    const Mat att = Naive::attention(q, k, v, n, nh, nkv, hd, hd, 1.0 / std::sqrt(static_cast<double>(hd)));
    const Mat o = Naive::linear(att, m.W(p + "self_attn.o_proj.weight"), nh * hd);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    x = h;
    Naive::rmsnorm(x, m.W(p + "post_attention_layernorm.weight"), d, m.eps);
    const std::string moe = p + "block_sparse_moe.";
    const Mat logits = Naive::linear(x, m.W(moe + "gate.weight"), d);
    for (int64_t t = 0; t < n; ++t) {
      // softmax over all experts, top-k, renormalised over the chosen.
      std::vector<double> prob(logits.begin() + t * n_exp, logits.begin() + (t + 1) * n_exp);
      const double mx = *std::max_element(prob.begin(), prob.end());
      double z = 0;
      for (auto& e : prob) z += (e = std::exp(e - mx));
      for (auto& e : prob) e /= z;
      const std::vector<int64_t> chosen = Naive::topk(prob, top_k);
      double sum = 0;
      for (int64_t e : chosen) sum += prob[e];
      const Mat xt(x.begin() + t * d, x.begin() + (t + 1) * d);
      for (int64_t e : chosen) {
        const std::string ep = moe + "experts." + std::to_string(e) + ".";
        const Mat y = m.swiglu(xt, ep + "w1.weight", ep + "w3.weight", ep + "w2.weight");
        for (int64_t i = 0; i < d; ++i) h[t * d + i] += prob[e] / sum * y[i];
      }
    }
  }
  return m.head(h);
}

// modeling_deepseek_v3.py with modeling_rope_utils.py's YaRN.
double get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

Mat deepseek_forward(const Naive& m, const std::vector<int32_t>& ids) {
  const auto& c = m.cfg;
  const int64_t n = static_cast<int64_t>(ids.size()), d = m.d, nh = m.n_head;
  const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], vd = c["v_head_dim"];
  const int64_t lora = c["kv_lora_rank"], qk = nope + rope;
  const bool q_lora = c.contains("q_lora_rank") && c["q_lora_rank"].is_number_integer();
  const int64_t q_rank = q_lora ? c["q_lora_rank"].get<int64_t>() : 0;
  const bool interleave = c.value("rope_interleave", true);
  const int64_t n_exp = c["n_routed_experts"], top_k = c["num_experts_per_tok"];
  const int64_t n_group = c["n_group"], topk_group = c["topk_group"], first_dense = c["first_k_dense_replace"];
  const bool norm_topk = c["norm_topk_prob"];
  const double routed_scale = c["routed_scaling_factor"];
  // q_a_layernorm / kv_a_layernorm are built without an eps argument: DeepseekV3RMSNorm's 1e-6.
  const double lora_eps = 1e-6;

  // RoPE over the rope part (config.head_dim = qk_rope_head_dim); YaRN per _compute_yarn_parameters.
  const int64_t dim = rope;
  std::vector<double> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv_freq[i] = 1.0 / std::pow(m.theta, 2.0 * i / dim);
  double attention_factor = 1.0;
  double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) {
    const auto& rs = c["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    if (type == "yarn") {
      const double factor = rs["factor"], orig = rs["original_max_position_embeddings"];
      const double ms = rs.value("mscale", 0.0), ms_all = rs.value("mscale_all_dim", 0.0);
      attention_factor = (ms != 0 && ms_all != 0) ? get_mscale(factor, ms) / get_mscale(factor, ms_all)
                                                  : get_mscale(factor, 1.0);
      const double beta_fast = rs.value("beta_fast", 32.0), beta_slow = rs.value("beta_slow", 1.0);
      auto corr_dim = [&](double rot) {
        return (dim * std::log(orig / (rot * 2 * M_PI))) / (2 * std::log(m.theta));
      };
      double low = std::max(std::floor(corr_dim(beta_fast)), 0.0);
      double high = std::min(std::ceil(corr_dim(beta_slow)), static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrap = 1.0 - ramp;
        const double base_f = 1.0 / std::pow(m.theta, 2.0 * i / dim);
        inv_freq[i] = base_f / factor * (1.0 - extrap) + base_f * extrap;
      }
      // yarn_apply_mscale: the softmax scale gets mscale(factor, mscale_all_dim)^2.
      if (ms_all != 0) scale *= get_mscale(factor, ms_all) * get_mscale(factor, ms_all);
    }
  }
  // Rotates x[off .. off + rope) of a position-t row; cos and sin carry attention_factor.
  auto apply_rope = [&](double* x, int64_t t) {
    std::vector<double> out(rope);
    for (int64_t i = 0; i < rope / 2; ++i) {
      const double cs = std::cos(t * inv_freq[i]) * attention_factor, sn = std::sin(t * inv_freq[i]) * attention_factor;
      // apply_rotary_pos_emb_interleave: pairs (2i, 2i+1), output [rotated evens, rotated odds].
      // apply_rotary_pos_emb: pairs (i, i + rope/2) in place.
      const double a = interleave ? x[2 * i] : x[i], b = interleave ? x[2 * i + 1] : x[i + rope / 2];
      out[i] = a * cs - b * sn;
      out[i + rope / 2] = b * cs + a * sn;
    }
    std::copy(out.begin(), out.end(), x);
  };

  Mat h = m.embed(ids);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Mat x = h;
    Naive::rmsnorm(x, m.W(p + "input_layernorm.weight"), d, m.eps);
    Mat q;
    if (q_lora) {
      Mat qa = Naive::linear(x, m.W(p + "self_attn.q_a_proj.weight"), d);
      Naive::rmsnorm(qa, m.W(p + "self_attn.q_a_layernorm.weight"), q_rank, lora_eps);
      q = Naive::linear(qa, m.W(p + "self_attn.q_b_proj.weight"), q_rank);
    } else {
      q = Naive::linear(x, m.W(p + "self_attn.q_proj.weight"), d);
    }
    const Mat ckv = Naive::linear(x, m.W(p + "self_attn.kv_a_proj_with_mqa.weight"), d);  // [n, lora + rope]
    Mat kv_c(n * lora), k_pe(n * rope);
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(ckv.begin() + t * (lora + rope), lora, kv_c.begin() + t * lora);
      std::copy_n(ckv.begin() + t * (lora + rope) + lora, rope, k_pe.begin() + t * rope);
    }
    Naive::rmsnorm(kv_c, m.W(p + "self_attn.kv_a_layernorm.weight"), lora, lora_eps);
    const Mat kv = Naive::linear(kv_c, m.W(p + "self_attn.kv_b_proj.weight"), lora);  // [n, nh, nope + vd]
    for (int64_t t = 0; t < n; ++t) {
      apply_rope(k_pe.data() + t * rope, t);
      for (int64_t hh = 0; hh < nh; ++hh) apply_rope(q.data() + (t * nh + hh) * qk + nope, t);
    }
    // Keys per head: [k_nope, k_pe shared by all heads]; values from kv_b_proj.
    Mat k(n * nh * qk), v(n * nh * vd);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hh = 0; hh < nh; ++hh) {
        const double* src = kv.data() + (t * nh + hh) * (nope + vd);
        std::copy_n(src, nope, k.begin() + (t * nh + hh) * qk);
        std::copy_n(k_pe.begin() + t * rope, rope, k.begin() + (t * nh + hh) * qk + nope);
        std::copy_n(src + nope, vd, v.begin() + (t * nh + hh) * vd);
      }
    const Mat att = Naive::attention(q, k, v, n, nh, nh, qk, vd, scale);
    const Mat o = Naive::linear(att, m.W(p + "self_attn.o_proj.weight"), nh * vd);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    x = h;
    Naive::rmsnorm(x, m.W(p + "post_attention_layernorm.weight"), d, m.eps);
    if (l < first_dense) {
      const Mat y = m.swiglu(x, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight");
      for (size_t i = 0; i < h.size(); ++i) h[i] += y[i];
      continue;
    }
    const Mat logits = Naive::linear(x, m.W(p + "mlp.gate.weight"), d);
    const Mat& bias = m.W(p + "mlp.gate.e_score_correction_bias");
    const int64_t per_group = n_exp / n_group;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> score(n_exp), choice(n_exp);
      for (int64_t e = 0; e < n_exp; ++e) {
        score[e] = 1.0 / (1.0 + std::exp(-logits[t * n_exp + e]));
        choice[e] = score[e] + bias[e];
      }
      // Group score: sum of the two largest biased scores in the group; keep topk_group groups.
      std::vector<double> group_score(n_group);
      for (int64_t g = 0; g < n_group; ++g) {
        std::vector<double> in_group(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::sort(in_group.rbegin(), in_group.rend());
        group_score[g] = in_group[0] + (per_group > 1 ? in_group[1] : 0.0);
      }
      std::vector<bool> keep(n_group, false);
      for (int64_t g : Naive::topk(group_score, topk_group)) keep[g] = true;
      for (int64_t e = 0; e < n_exp; ++e)
        if (!keep[e / per_group]) choice[e] = -INFINITY;
      const std::vector<int64_t> chosen = Naive::topk(choice, top_k);
      double denom = 1e-20;
      for (int64_t e : chosen) denom += score[e];
      const Mat xt(x.begin() + t * d, x.begin() + (t + 1) * d);
      for (int64_t e : chosen) {
        const double wgt = (norm_topk ? score[e] / denom : score[e]) * routed_scale;
        const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
        const Mat y = m.swiglu(xt, ep + "gate_proj.weight", ep + "up_proj.weight", ep + "down_proj.weight");
        for (int64_t i = 0; i < d; ++i) h[t * d + i] += wgt * y[i];
      }
      const std::string sp = p + "mlp.shared_experts.";
      const Mat y = m.swiglu(xt, sp + "gate_proj.weight", sp + "up_proj.weight", sp + "down_proj.weight");
      for (int64_t i = 0; i < d; ++i) h[t * d + i] += y[i];
    }
  }
  return m.head(h);
}


void check_family(const std::string& family, const model::ModelShape& shape,
                  Mat (*naive_forward)(const Naive&, const std::vector<int32_t>&),
                  const std::map<std::string, nlohmann::json>& config_overrides = {}) {
  const fs::path dir = fs::temp_directory_path() / ("dayzero-refmoe-" + family + "-" + std::to_string(getpid()));
  model::MakeModelOptions o;
  o.family = family;
  o.out_dir = dir.string();
  o.dtype = DType::kF32;
  o.seed = kSeed;
  o.shape = shape;
  ASSERT_TRUE(model::make_model(o).ok());
  if (!config_overrides.empty()) {
    nlohmann::json cfg;
    {
      std::ifstream in(dir / "config.json");
      cfg = nlohmann::json::parse(in);
    }
    for (const auto& [k, v] : config_overrides) cfg[k] = v;
    std::ofstream(dir / "config.json") << cfg.dump(2);
  }

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

  const Naive ref = load_naive(dir);
  const Mat expected = naive_forward(ref, ids);
  ASSERT_EQ(expected.size(), ours.size());
  const int64_t vocab = ref.vocab;
  for (size_t t = 0; t < ids.size(); ++t) {
    // f32 compute against f64 loops: a few ulps (~1e-7) per op over a handful of layers stay
    // far below 1e-5, while a wrong expert, routing weight, scale or rotation is >= 1e-3.
    const double err = rel_l2(ours.data() + t * vocab, expected.data() + t * vocab, vocab);
    EXPECT_LT(err, 1e-5) << family << " position " << t << " seed " << kSeed;
  }
  fs::remove_all(dir);
}

TEST(ReferenceMoeMla, MixtralLogitsMatchNaiveLoops) {
  check_family("mixtral",
               {.n_vocab = 300, .n_embd = 48, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ff = 64,
                .n_expert = 4, .n_expert_used = 2, .n_ff_expert = 64},
               mixtral_forward);
}

// 3 layers: layer 0 dense, layers 1-2 MoE; 8 experts in 4 groups of 2, 2 groups kept, top-2;
// q and kv lora rank 32, nope/v dims 16, rope dim 8 interleaved, YaRN x4 (make_config).
// The generated rms_norm_eps (1e-5) differs from the 1e-6 that q_a_layernorm / kv_a_layernorm
// always use (DeepseekV3RMSNorm's default in transformers), so both epsilons are exercised.
TEST(ReferenceMoeMla, DeepseekV3LogitsMatchNaiveLoops) {
  check_family("deepseek_v3",
               {.n_vocab = 300, .n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 4, .head_dim = 16, .n_ff = 128,
                .n_expert = 8, .n_expert_used = 2, .n_ff_expert = 32},
               deepseek_forward);
}

}  // namespace
}  // namespace dayzero
