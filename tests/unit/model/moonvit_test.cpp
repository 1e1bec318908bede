// A 1-layer MoonViT tower + patchmerger projector (Kimi-K2.5's, configured by the kimi_k25
// adapter from the published config with its sizes shrunk) on the CPU backend against a plain
// f64 implementation written out here: direct conv sum, Keys' bicubic resampling of the table,
// fused qkv, 2-D RoPE, softmax attention, LayerNorms, both GELUs, the 2x2 merge. Not here: the
// checkpoint layout against transformers (tests/e2e/kimi_k25_golden_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "backend/backend.h"
#include "model/blocks/vision.h"
#include "model/registry.h"
#include "plain_twin.h"

namespace dayzero::model {
namespace {

using plain::Mat;
using plain::layer_norm;
using plain::linear;
using plain::rel_l2;

// Records the named intermediates it is asked for (CPU backend: tensors are host memory).
class Keep final : public ActivationSink {
 public:
  bool wants(const std::string& name) const override { return name == "vision.selected"; }
  void put(const std::string& name, const Tensor& t) override {
    got[name].assign(t.f32(), t.f32() + t.numel());
  }
  std::map<std::string, std::vector<float>> got;
};

// The published tensor names (vision_tower.*, mm_projector.*), as the adapter declares them.
blocks::VisionNames published_names() {
  const std::string v = "vision_tower.", l = v + "encoder.blocks.{L}.", p = "mm_projector.";
  blocks::VisionNames x;
  x.patch_w = v + "patch_embed.proj.weight", x.patch_b = v + "patch_embed.proj.bias";
  x.pos_embedding = v + "patch_embed.pos_emb.weight";
  x.ln1_w = l + "norm0.weight", x.ln1_b = l + "norm0.bias", x.ln2_w = l + "norm1.weight", x.ln2_b = l + "norm1.bias";
  x.qkv_w = l + "wqkv.weight", x.qkv_b = l + "wqkv.bias", x.o_w = l + "wo.weight", x.o_b = l + "wo.bias";
  x.fc1_w = l + "mlp.fc0.weight", x.fc1_b = l + "mlp.fc0.bias", x.fc2_w = l + "mlp.fc1.weight",
  x.fc2_b = l + "mlp.fc1.bias";
  x.post_norm_w = v + "encoder.final_layernorm.weight", x.post_norm_b = v + "encoder.final_layernorm.bias";
  x.proj_norm_w = p + "pre_norm.weight", x.proj_norm_b = p + "pre_norm.bias";
  x.proj1_w = p + "proj.0.weight", x.proj1_b = p + "proj.0.bias", x.proj2_w = p + "proj.2.weight",
  x.proj2_b = p + "proj.2.bias";
  return x;
}

// Keys' cubic convolution kernel with A = -0.75 (torch's bicubic), at distance |s|.
double keys(double s) {
  const double A = -0.75, a = std::abs(s);
  if (a <= 1) return (A + 2) * a * a * a - (A + 3) * a * a + 1;
  if (a < 2) return A * a * a * a - 5 * A * a * a + 8 * A * a - 4 * A;
  return 0;
}

// Output position i of n_out along an axis of n_in: the weight of every input index, as
// F.interpolate(mode="bicubic", align_corners=False) forms it: source (i + 0.5) n_in / n_out - 0.5,
// taps floor(source) - 1 .. + 2 at their distances, an index outside the axis read at its border.
std::vector<double> axis_weights(int64_t i, int64_t n_in, int64_t n_out, bool nearest) {
  std::vector<double> w(n_in, 0.0);
  if (nearest) {  // F.interpolate(mode="nearest"): index floor(i n_in / n_out)
    w[std::min<int64_t>(i * n_in / n_out, n_in - 1)] = 1;
    return w;
  }
  const double src = (i + 0.5) * double(n_in) / double(n_out) - 0.5;
  const double base = std::floor(src);
  for (int t = -1; t <= 2; ++t) {
    const double at = base + t;
    const int64_t idx = std::clamp<int64_t>(static_cast<int64_t>(at), 0, n_in - 1);
    w[idx] += keys(src - at);
  }
  return w;
}

struct Variant {
  bool swap_rope_axes = false;  // negative control: pair j turned by (j even ? row : column)
  bool nearest_table = false;   // negative control: the table read at its nearest cell, not bicubic
};

struct Plain {
  Mat selected, out;
};

// The plain MoonViT: every step in f64 from the weights v and the pixels [C, gh * p, gw * p].
Plain plain_moonvit(std::map<std::string, std::vector<float>>& v, const std::vector<float>& pixels, int64_t gh,
                    int64_t gw, int64_t p, int64_t C, int64_t d, int64_t heads, int64_t ff, int64_t th, int64_t tw,
                    int64_t text_d, Variant var) {
  const int64_t n = gh * gw, hd = d / heads, H = gh * p, W = gw * p;
  const double eps = 1e-5;
  const std::string l = "vision_tower.encoder.blocks.0.";
  // Patch conv (stride = kernel = p) with bias, as a direct sum.
  Mat h(n * d);
  const auto& cw = v["vision_tower.patch_embed.proj.weight"];
  const auto& cb = v["vision_tower.patch_embed.proj.bias"];
  for (int64_t py = 0; py < gh; ++py)
    for (int64_t px = 0; px < gw; ++px)
      for (int64_t o = 0; o < d; ++o) {
        double s = cb[o];
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx)
              s += cw[((o * C + c) * p + ky) * p + kx] * pixels[(c * H + py * p + ky) * W + px * p + kx];
        h[(py * gw + px) * d + o] = s;
      }
  // The [th, tw, d] table resampled to [gh, gw, d]: separable weights, summed over the whole table.
  const auto& table = v["vision_tower.patch_embed.pos_emb.weight"];
  for (int64_t y = 0; y < gh; ++y) {
    const std::vector<double> wy = axis_weights(y, th, gh, var.nearest_table);
    for (int64_t x = 0; x < gw; ++x) {
      const std::vector<double> wx = axis_weights(x, tw, gw, var.nearest_table);
      for (int64_t c = 0; c < d; ++c) {
        double s = 0;
        for (int64_t a = 0; a < th; ++a)
          for (int64_t b = 0; b < tw; ++b) s += wy[a] * wx[b] * table[(a * tw + b) * d + c];
        h[(y * gw + x) * d + c] += s;
      }
    }
  }
  // The encoder layer.
  Mat x = layer_norm(h, n, d, v[l + "norm0.weight"], v[l + "norm0.bias"], eps);
  const auto& wqkv = v[l + "wqkv.weight"];
  const auto& bqkv = v[l + "wqkv.bias"];
  Mat q = linear(x, n, d, wqkv, bqkv, d, 0), k = linear(x, n, d, wqkv, bqkv, d, d),
      vv = linear(x, n, d, wqkv, bqkv, d, 2 * d);
  for (Mat* m : {&q, &k})
    for (int64_t r = 0; r < n; ++r) {
      const double row = double(r / gw), col = double(r % gw);
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t j = 0; j < hd / 2; ++j) {
          const bool width = (j % 2 == 0) != var.swap_rope_axes;
          const double angle = (width ? col : row) * std::pow(10000.0, -4.0 * double(j / 2) / double(hd));
          double& a = (*m)[r * d + hh * hd + 2 * j];
          double& b = (*m)[r * d + hh * hd + 2 * j + 1];
          const double na = a * std::cos(angle) - b * std::sin(angle), nb = a * std::sin(angle) + b * std::cos(angle);
          a = na, b = nb;
        }
    }
  const Mat att = plain::attention(q, k, vv, n, heads, hd);
  Mat o = linear(att, n, d, v[l + "wo.weight"], v[l + "wo.bias"], d);
  for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
  x = layer_norm(h, n, d, v[l + "norm1.weight"], v[l + "norm1.bias"], eps);
  Mat f = linear(x, n, d, v[l + "mlp.fc0.weight"], v[l + "mlp.fc0.bias"], ff);
  for (auto& e : f) e = 0.5 * e * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (e + 0.044715 * e * e * e)));
  f = linear(f, n, ff, v[l + "mlp.fc1.weight"], v[l + "mlp.fc1.bias"], d);
  for (size_t i = 0; i < h.size(); ++i) h[i] += f[i];
  Plain r;
  r.selected = layer_norm(h, n, d, v["vision_tower.encoder.final_layernorm.weight"],
                          v["vision_tower.encoder.final_layernorm.bias"], eps);
  // The patchmerger: pre_norm over each patch, then x.view(gh/2, 2, gw/2, 2, d).permute(0, 2, 1, 3, 4)
  // flattened to [(gh/2)(gw/2), 4d]; Linear -> GELU (erf) -> Linear.
  const Mat normed =
      layer_norm(r.selected, n, d, v["mm_projector.pre_norm.weight"], v["mm_projector.pre_norm.bias"], eps);
  const int64_t oh = gh / 2, ow = gw / 2, m = oh * ow;
  Mat merged(m * 4 * d);
  for (int64_t by = 0; by < oh; ++by)
    for (int64_t dy = 0; dy < 2; ++dy)
      for (int64_t bx = 0; bx < ow; ++bx)
        for (int64_t dx = 0; dx < 2; ++dx)
          for (int64_t c = 0; c < d; ++c)
            merged[(by * ow + bx) * 4 * d + (dy * 2 + dx) * d + c] = normed[((by * 2 + dy) * gw + bx * 2 + dx) * d + c];
  Mat p1 = linear(merged, m, 4 * d, v["mm_projector.proj.0.weight"], v["mm_projector.proj.0.bias"], 4 * d);
  for (auto& e : p1) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
  r.out = linear(p1, m, 4 * d, v["mm_projector.proj.2.weight"], v["mm_projector.proj.2.bias"], text_d);
  return r;
}

TEST(MoonVit, OneLayerTowerAndPatchmergerMatchAPlainImplementation) {
  // The published config with a tiny tower: width 32, 2 heads (head_dim 16), 1 layer, 4-px
  // patches, a 4x4 position table; the text width stays the published 7168.
  std::ifstream cf(std::string(DAYZERO_FIXTURES_DIR) + "/configs/Kimi-K2.5/config.json");
  ASSERT_TRUE(cf.good());
  nlohmann::json cfg = nlohmann::json::parse(cf);
  const int64_t d = 32, heads = 2, ff = 64, p = 4, th = 4, tw = 4, C = 3;
  auto& vc = cfg["vision_config"];
  vc["vt_hidden_size"] = d, vc["mm_hidden_size"] = d, vc["vt_num_attention_heads"] = heads;
  vc["vt_intermediate_size"] = ff, vc["vt_num_hidden_layers"] = 1, vc["patch_size"] = p;
  vc["init_pos_emb_height"] = th, vc["init_pos_emb_width"] = tw;
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_STREQ((*a)->family(), "kimi_k25");
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const VisionParams& vp = hp->vision;
  const int64_t text_d = hp->n_embd;
  ASSERT_EQ(text_d, 7168);
  ASSERT_EQ(vp.merge_kernel, 2);
  ASSERT_EQ(vp.rope_theta, 10000.0);
  ASSERT_EQ(vp.projector_norm_eps, 1e-5);
  // The tower's tensors as the adapter declares them; the hand-written names are the same set.
  const blocks::VisionNames names = published_names();
  std::set<std::string> adapter_names, ours;
  std::vector<TensorSpec> specs;
  for (const TensorSpec& s : (*a)->tensor_specs(*hp))
    if (s.component == Component::kVision || s.component == Component::kProjector) {
      adapter_names.insert(s.name);
      specs.push_back(s);
    }
  for (const TensorSpec& s : blocks::vision_specs(vp, names, text_d)) ours.insert(s.name);
  ASSERT_EQ(adapter_names, ours);
  ASSERT_EQ(adapter_names.size(), 2u + 1 + 12 + 2 + 6);

  // Random weights: LayerNorm weights near 1, everything else small around 0.
  std::mt19937 g(2026);
  std::uniform_real_distribution<float> u(-1, 1);
  std::map<std::string, std::vector<float>> v;
  Weights w;
  for (const TensorSpec& s : specs) {
    const bool ln = s.name.find("norm") != std::string::npos;
    const bool ln_w = ln && s.name.ends_with(".weight");
    const float scale = ln_w ? 0.1f : s.name.find("pos_emb") != std::string::npos ? 0.5f : 0.3f;
    auto& x = v[s.name];
    x.resize(static_cast<size_t>(shape_numel(s.shape)));
    for (auto& e : x) e = (ln_w ? 1.0f : 0.0f) + scale * u(g);
    Tensor t = Tensor::host(DType::kF32, s.shape);
    std::copy(x.begin(), x.end(), t.f32());
    w.put(s.name, std::move(t));
  }
  // A 2x6 patch grid (rows != columns, each side other than the table's: one shrunk, one grown).
  const int64_t gh = 2, gw = 6;
  image::ProcessedImage img;
  img.source = "pattern";
  img.height = gh * p, img.width = gw * p, img.patch_size = p, img.grid_h = gh, img.grid_w = gw;
  img.pixels.resize(static_cast<size_t>(C * img.height * img.width));
  for (auto& e : img.pixels) e = u(g);

  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  Keep keep;
  const blocks::VisionContext ctx{**be, vp, names, w, &keep};
  const Tensor got = blocks::image_features(ctx, img);
  ASSERT_EQ(got.dim(0), blocks::image_feature_count(vp, img));
  ASSERT_EQ(got.dim(0), 3);
  ASSERT_EQ(got.dim(1), text_d);
  ASSERT_EQ(keep.got["vision.selected"].size(), static_cast<size_t>(gh * gw * d));

  const Plain want = plain_moonvit(v, img.pixels, gh, gw, p, C, d, heads, ff, th, tw, text_d, {});
  // f32 against f64 through five LayerNorms, a softmax over 12 tokens and GEMMs of width <= 128:
  // measured 1.7e-7 (vision.selected, tolerance 2.5e-7) and 2.61e-7 (the features, 4e-7).
  const double err_sel = rel_l2(keep.got["vision.selected"].data(), want.selected);
  const double err = rel_l2(got.f32(), want.out);
  EXPECT_LT(err_sel, 2.5e-7) << "seed 2026";
  EXPECT_LT(err, 4e-7) << "seed 2026";

  // Negative controls, each far outside the tolerance: the plain tower with the RoPE axes
  // swapped (even pairs by row, odd by column; measured 0.232) or with the table read at its
  // nearest cells instead of resampled bicubically (measured 0.417).
  Variant swap;
  swap.swap_rope_axes = true;
  Variant nearest;
  nearest.nearest_table = true;
  const double bad_rope =
      rel_l2(got.f32(), plain_moonvit(v, img.pixels, gh, gw, p, C, d, heads, ff, th, tw, text_d, swap).out);
  const double bad_table =
      rel_l2(got.f32(), plain_moonvit(v, img.pixels, gh, gw, p, C, d, heads, ff, th, tw, text_d, nearest).out);
  // And on the tower's side: the erf GELU in its MLP in place of the tanh one (measured 1.69e-4).
  VisionParams wrong = vp;
  wrong.act = VisionParams::Act::kGelu;
  const blocks::VisionContext bad_ctx{**be, wrong, names, w, nullptr};
  const double bad_act = rel_l2(blocks::image_features(bad_ctx, img).f32(), want.out);
  std::printf("moonvit rel_l2 selected %.3g, features %.3g; RoPE axes swapped %.3g, table nearest %.3g, "
              "erf GELU %.3g\n",
              err_sel, err, bad_rope, bad_table, bad_act);
  EXPECT_GT(bad_rope, 100 * 4e-7);
  EXPECT_GT(bad_table, 100 * 4e-7);
  EXPECT_GT(bad_act, 100 * 4e-7);
}

}  // namespace
}  // namespace dayzero::model
