// The tiny deepseek_v4 model (tests/data/golden/deepseek_v4.yaml, written by make-model in the
// published tensor names) run end to end on the host from the DeepSeek-V4 blocks (mhc,
// v4_attention with v4_compressor and v4_indexer, v4_routing, v4_ffn) and held against
// transformers 5.25 (tests/data/golden/deepseek_v4.safetensors): every layer's hc streams and the
// logits over the 40-token prompt (longer than the window of 8, a CSA block of 4 and an HCA block
// of 8), then the 8 greedy tokens decoded one call each with every cache carried (compressed
// entries close at 44 and 48 tokens), their logits against transformers' cached decode. The
// issue's negative controls (Sinkhorn at 1 iteration, compress_rope_theta = rope_theta, softmax
// instead of sqrtsoftplus, tid2eid off by one) each fail the tolerance. This composition lives in
// the test from the blocks' host functions alone; the runtime's composition (blocks/v4_layer,
// backend GEMMs for the router and experts) is tests/e2e/deepseek_v4_golden_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "model/blocks/mhc.h"
#include "tests/unit/model/v4_golden.h"
#include "model/blocks/v4_attention.h"
#include "model/blocks/v4_compressor.h"
#include "model/blocks/v4_ffn.h"
#include "model/blocks/v4_indexer.h"
#include "model/blocks/v4_routing.h"
#include "model/model_folder.h"
#include "tools/make_model.h"

namespace dayzero::model::blocks {
namespace {

namespace fs = std::filesystem;
using v4_test::read_all;
using v4_test::rel_l2;
using v4_test::Tensors;

struct Model {
  HParams hp;
  Tensors w;
  std::vector<float> main_freq, compress_freq;
};

const Model& tiny() {
  static const Model m = [] {
    Model m;
    const fs::path dir = fs::temp_directory_path() / ("dz-v4-model-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    tools::MakeModelOptions o;
    EXPECT_TRUE(tools::read_make_model_yaml(std::string(DAYZERO_SOURCE_DIR) + "/tests/data/golden/deepseek_v4.yaml", o).ok());
    o.out_dir = dir.string();
    const Status made = tools::make_model(o);
    EXPECT_TRUE(made.ok()) << made.message();
    auto folder = open_model_folder(dir.string(), WeightsNeeded::kIfPresent);
    EXPECT_TRUE(folder.ok()) << folder.status().message();
    m.hp = folder->hp;
    m.w = read_all((dir / "model.safetensors").string());
    fs::remove_all(dir);
    HParams main = m.hp, compress = m.hp;
    main.rope_scaling = RopeScaling{};
    compress.rope_theta = m.hp.deepseek_v4().compress_rope_theta;
    m.main_freq = rope_inv_freq(main);
    m.compress_freq = rope_inv_freq(compress);
    return m;
  }();
  return m;
}

const std::vector<float>& g(const std::string& name) { return v4_test::golden(name); }
const std::vector<float>& W(const std::string& name) {
  const auto it = tiny().w.find(name);
  EXPECT_NE(it, tiny().w.end()) << name;
  static const std::vector<float> kEmpty;
  return it == tiny().w.end() ? kEmpty : it->second;
}


void rmsnorm_rows(std::vector<float>& x, int64_t n, int64_t d, const std::vector<float>& w, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(x[r * d + i]) * x[r * d + i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
    for (int64_t i = 0; i < d; ++i) x[r * d + i] = w[i] * (x[r * d + i] * inv);
  }
}
std::vector<float> linear(const std::vector<float>& x, int64_t n, int64_t in, const std::vector<float>& w, int64_t out) {
  std::vector<float> y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

struct Bugs {
  bool sinkhorn_1 = false, compress_theta_main = false, softmax = false, hash_off_by_one = false;
};

// One sequence's caches, per layer.
struct LayerState {
  V4WindowCache window;
  CompressorState kv, index;
};

// Runs tokens at positions state-end.. through the model; returns the logits of every row
// [n, vocab] and, when layer_out is given, each layer's streams [n, hc * d].
std::vector<float> forward(const std::vector<int32_t>& tokens, std::vector<LayerState>& st, const Bugs& bug,
                           std::vector<std::vector<float>>* layer_out) {
  const Model& m = tiny();
  const HParams& hp = m.hp;
  const DeepseekV4Params& v = hp.deepseek_v4();
  const int64_t n = static_cast<int64_t>(tokens.size()), d = hp.n_embd, hc = v.hc_mult;
  const float eps = static_cast<float>(hp.rms_eps);
  const std::vector<float>& cfreq = bug.compress_theta_main ? m.main_freq : m.compress_freq;
  HyperConnectionSizes hs{n, hc, d, bug.sinkhorn_1 ? 1 : v.hc_sinkhorn_iters, static_cast<float>(v.hc_eps), eps};
  std::vector<float> streams(n * hc * d);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hc; ++j)
      std::copy_n(W("embed.weight").begin() + tokens[t] * d, d, streams.begin() + (t * hc + j) * d);
  const int64_t pos0 = st[0].window.end;
  std::vector<float> collapsed(n * d), post(n * hc), comb(n * hc * hc), out(n * d);
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const V4Attention kind = v.layer_types[l];
    LayerState& s = st[l];
    hyper_connection_pre(hs, streams, W(p + "hc_attn_fn"), W(p + "hc_attn_base"), W(p + "hc_attn_scale"), collapsed,
                         post, comb);
    std::vector<float> x = collapsed;
    rmsnorm_rows(x, n, d, W(p + "attn_norm.weight"), eps);
    V4Compressed cm;
    std::vector<int32_t> picks;
    if (kind != V4Attention::kSliding) {
      const bool csa = kind == V4Attention::kCompressedSparse;
      const CompressorSizes cs{d, hp.head_dim, v.compress_rate(l), csa ? 2 : 1, v.rope_dim, eps};
      compress_kv(cs, s.kv, x, n, W(p + "attn.compressor.wkv.weight"), W(p + "attn.compressor.wgate.weight"),
                  W(p + "attn.compressor.ape"), W(p + "attn.compressor.norm.weight"), cfreq);
      cm = {s.kv.entries, s.kv.n_entries, cs.rate, {}, 0};
      if (csa) {
        const CompressorSizes ics{d, v.index_head_dim, v.csa_rate, 2, v.rope_dim, eps};
        compress_kv(ics, s.index, x, n, W(p + "attn.indexer.compressor.wkv.weight"),
                    W(p + "attn.indexer.compressor.wgate.weight"), W(p + "attn.indexer.compressor.ape"),
                    W(p + "attn.indexer.compressor.norm.weight"), cfreq);
        std::vector<float> qr = linear(x, n, d, W(p + "attn.wq_a.weight"), v.q_lora_rank);
        rmsnorm_rows(qr, n, v.q_lora_rank, W(p + "attn.q_norm.weight"), eps);
        const IndexerSizes is{d, v.q_lora_rank, v.index_n_heads, v.index_head_dim, v.rope_dim, v.csa_rate, v.index_topk};
        picks.assign(n * v.index_topk, -1);
        index_select(is, x, qr, n, pos0, s.index.entries, s.index.n_entries, W(p + "attn.indexer.wq_b.weight"),
                     W(p + "attn.indexer.weights_proj.weight"), cfreq, picks);
        cm.picks = picks;
        cm.topk = v.index_topk;
      }
    }
    const V4AttentionSizes as{d, v.q_lora_rank, hp.n_head, hp.head_dim, v.rope_dim, v.sliding_window, v.o_groups,
                              v.o_lora_rank, eps};
    v4_attention(as, s.window, x, n, W(p + "attn.wq_a.weight"), W(p + "attn.q_norm.weight"), W(p + "attn.wq_b.weight"),
                 W(p + "attn.wkv.weight"), W(p + "attn.kv_norm.weight"), W(p + "attn.attn_sink"),
                 W(p + "attn.wo_a.weight"), W(p + "attn.wo_b.weight"),
                 kind == V4Attention::kSliding ? m.main_freq : cfreq, cm, out);
    hyper_connection_post(hs, streams, out, post, comb);
    hyper_connection_pre(hs, streams, W(p + "hc_ffn_fn"), W(p + "hc_ffn_base"), W(p + "hc_ffn_scale"), collapsed, post,
                         comb);
    x = collapsed;
    rmsnorm_rows(x, n, d, W(p + "ffn_norm.weight"), eps);
    const std::vector<float> logits = linear(x, n, d, W(p + "ffn.gate.weight"), hp.n_expert);
    V4RouterOptions ro{bug.softmax ? "softmax" : v.scoring_func, hp.n_expert_used,
                       static_cast<float>(v.routed_scaling_factor)};
    std::vector<int32_t> table;
    if (v.hash_moe[l]) {
      for (float e : W(p + "ffn.gate.tid2eid"))
        table.push_back(static_cast<int32_t>((static_cast<int64_t>(e) + (bug.hash_off_by_one ? 1 : 0)) % hp.n_expert));
    }
    auto r = v.hash_moe[l] ? route_v4(logits, n, hp.n_expert, {}, table, tokens, ro)
                           : route_v4(logits, n, hp.n_expert, W(p + "ffn.gate.bias"), {}, {}, ro);
    EXPECT_TRUE(r.ok()) << r.status().message();
    const auto expert = [&](int e) {
      const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      return V4FfnWeights{W(ep + "w1.weight"), W(ep + "w3.weight"), W(ep + "w2.weight")};
    };
    const V4FfnWeights shared{W(p + "ffn.shared_experts.w1.weight"), W(p + "ffn.shared_experts.w3.weight"),
                              W(p + "ffn.shared_experts.w2.weight")};
    v4_ffn(x, n, d, *r, hp.n_expert_used, expert, hp.n_ff_expert, shared, v.n_shared_experts * hp.n_ff_expert,
           static_cast<float>(hp.swiglu_limit), out);
    hyper_connection_post(hs, streams, out, post, comb);
    if (layer_out) layer_out->push_back(streams);
  }
  std::vector<float> final_rows(n * d);
  hyper_head(hs, streams, W("hc_head_fn"), W("hc_head_base"), W("hc_head_scale"), final_rows);
  rmsnorm_rows(final_rows, n, d, W("norm.weight"), eps);
  return linear(final_rows, n, d, W("head.weight"), hp.n_vocab);
}

struct Result {
  std::vector<std::vector<float>> layers;
  std::vector<float> logits_last;
  std::vector<std::vector<float>> decode;  // [8][vocab]
};
Result run(const Bugs& bug = {}) {
  const HParams& hp = tiny().hp;
  std::vector<LayerState> st(hp.n_layer);
  const std::vector<float>& ids_f = g("prompt_ids");
  const std::vector<int32_t> ids(ids_f.begin(), ids_f.end());
  Result res;
  const std::vector<float> logits = forward(ids, st, bug, &res.layers);
  res.logits_last.assign(logits.end() - hp.n_vocab, logits.end());
  for (float t : g("greedy_ids")) res.decode.push_back(forward({static_cast<int32_t>(t)}, st, bug, nullptr));
  return res;
}

// The compressed rotary (YaRN x4 over 512 positions at theta 160000, attention factor 1) and the
// main one as dayzero computes them from the config, against transformers' buffers.
TEST(V4Model, RotariesMatchTransformers) {
  EXPECT_LT(rel_l2(tiny().compress_freq, g("cmp.compress_inv_freq")), 1e-7);
  EXPECT_LT(rel_l2(tiny().main_freq, g("cmp.main_inv_freq")), 1e-7);
}

// Measured (f32 both sides): layer outputs 3.24e-7, 5.17e-7, 6.21e-7, 6.79e-7; last logits
// 6.95e-7; the 8 decode steps' logits 8.11e-7 at worst. Tolerance 1e-6. The controls' logits
// are off by 1.97e-2 (Sinkhorn 1), 2.00e-1 (compress theta), 3.02e-1 (softmax), 9.15e-1 (hash),
// and three of them lie within 5.9e-7 of transformers run with the same bug.
constexpr double kLayerTol = 1e-6, kLogitTol = 1e-6;

TEST(V4Model, PrefillAndDecodeMatchTransformers) {
  const Result r = run();
  const HParams& hp = tiny().hp;
  double worst = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    const double e = rel_l2(r.layers[l], g("layers." + std::to_string(l) + ".layer_out"));
    worst = std::max(worst, e);
    EXPECT_LT(e, kLayerTol) << "layer " << l;
    std::printf("layers.%d.layer_out: relative L2 %.2e\n", l, e);
  }
  const double e_logits = rel_l2(r.logits_last, g("logits_last"));
  EXPECT_LT(e_logits, kLogitTol);
  std::printf("logits_last: relative L2 %.2e\n", e_logits);
  const std::vector<float>& dec = g("decode_logits");
  const std::vector<float>& greedy = g("greedy_ids");
  double worst_decode = 0;
  for (size_t j = 0; j < r.decode.size(); ++j) {
    const std::vector<float> want(dec.begin() + j * hp.n_vocab, dec.begin() + (j + 1) * hp.n_vocab);
    worst_decode = std::max(worst_decode, rel_l2(r.decode[j], want));
    const auto arg = std::max_element(r.decode[j].begin(), r.decode[j].end()) - r.decode[j].begin();
    if (j + 1 < greedy.size()) {
      EXPECT_EQ(arg, static_cast<int64_t>(greedy[j + 1])) << "decode step " << j;
    }
  }
  EXPECT_LT(worst_decode, kLogitTol);
  std::printf("decode logits (8 steps): worst relative L2 %.2e\n", worst_decode);
  const auto first = std::max_element(r.logits_last.begin(), r.logits_last.end()) - r.logits_last.begin();
  EXPECT_EQ(first, static_cast<int64_t>(greedy[0]));
}

TEST(V4Model, NegativeControlsFail) {
  const std::pair<const char*, Bugs> cases[] = {{"sinkhorn_1", {true, false, false, false}},
                                                {"compress_theta_main", {false, true, false, false}},
                                                {"softmax_scores", {false, false, true, false}},
                                                {"hash_off_by_one", {false, false, false, true}}};
  for (const auto& [name, bug] : cases) {
    const Result r = run(bug);
    const double e = rel_l2(r.logits_last, g("logits_last"));
    EXPECT_GT(e, kLogitTol) << name;
    // The same bug in transformers gives the control's logits: the composition reproduces it.
    const double e_control = rel_l2(r.logits_last, g(std::string("control.") + name + ".logits_last"));
    std::printf("%s: logits relative L2 %.2e to the golden, %.2e to transformers with the same bug\n", name, e,
                e_control);
  }
}

}  // namespace
}  // namespace dayzero::model::blocks
