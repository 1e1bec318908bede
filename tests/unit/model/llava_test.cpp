// The llava adapter and the vision-tower core: llava-1.5's inventory against its real index
// (transformers' defaults fill the keys config.json leaves out), a 1-layer CLIP tower with
// projector against a straightforward f64 implementation written here, the placement of
// image features and the expansion of placeholders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include "backend/backend.h"
#include "model/blocks/vision.h"
#include "model/registry.h"
#include "plain_twin.h"

namespace dayzero::model {
namespace {

const std::string kDir = std::string(DAYZERO_FIXTURES_DIR) + "/configs/llava-1.5-7b-hf/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

TEST(Llava, Llava15InventoryMatchesTheRealIndex) {
  const auto cfg = read_json(kDir + "config.json");
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "llava");
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  // LlamaConfig defaults for the sizes text_config leaves out; CLIPVisionConfig's quick_gelu.
  EXPECT_EQ(hp->n_embd, 4096);
  EXPECT_EQ(hp->n_layer, 32);
  EXPECT_EQ(hp->n_ff, 11008);
  EXPECT_EQ(hp->n_vocab, 32064);
  EXPECT_EQ(hp->vision.n_layer_run, 23);  // vision_feature_layer -2 of 24 layers
  EXPECT_EQ(hp->vision.image_token_id, 32000);
  EXPECT_EQ(hp->vision.act, VisionParams::Act::kQuickGelu);
  EXPECT_TRUE(hp->vision.drop_class_token);
  const auto index = read_json(kDir + "model.safetensors.index.json");
  std::set<std::string> real;
  for (const auto& [name, file] : index["weight_map"].items()) real.insert(name);
  std::set<std::string> ours, skipped;
  int64_t bytes = 0;
  for (const auto& s : (*a)->tensor_specs(*hp)) {
    ours.insert(s.name);
    bytes += shape_numel(s.shape) * 2;  // float16
    if (s.skip_load) skipped.insert(s.name);
  }
  EXPECT_EQ(real.size(), 686u);
  std::vector<std::string> missing, extra;
  std::set_difference(real.begin(), real.end(), ours.begin(), ours.end(), std::back_inserter(missing));
  std::set_difference(ours.begin(), ours.end(), real.begin(), real.end(), std::back_inserter(extra));
  EXPECT_TRUE(missing.empty()) << missing.size() << " real tensors not expected, first " << missing.front();
  EXPECT_TRUE(extra.empty()) << extra.size() << " expected tensors not in the checkpoint, first " << extra.front();
  EXPECT_EQ(bytes, index["metadata"]["total_size"].get<int64_t>());
  // Claimed and skipped: the last layer (16 tensors) and post_layernorm (2).
  EXPECT_EQ(skipped.size(), 18u);
  EXPECT_TRUE(skipped.count("vision_tower.vision_model.encoder.layers.23.mlp.fc2.weight"));
  EXPECT_TRUE(skipped.count("vision_tower.vision_model.post_layernorm.weight"));
  EXPECT_FALSE(skipped.count("vision_tower.vision_model.encoder.layers.22.mlp.fc2.weight"));
}

TEST(Llava, RefusesWhatItCannotHonour) {
  auto cfg = read_json(kDir + "config.json");
  const Adapter* a = *find_adapter(cfg);
  auto c = cfg;
  c["vision_feature_layer"] = nlohmann::json::array({-2, -5});
  EXPECT_FALSE(a->parse_hparams(c).ok());
  c = cfg;
  c["vision_feature_select_strategy"] = "middle";
  EXPECT_FALSE(a->parse_hparams(c).ok());
  c = cfg;
  c["text_config"]["model_type"] = "gpt_neox";
  EXPECT_FALSE(a->parse_hparams(c).ok());
}

// ---- a 1-layer CLIP tower + projector vs a plain f64 implementation ----

struct Rng {
  std::mt19937 g{1234};
  std::vector<float> v(size_t n, float scale, float offset = 0) {
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x(n);
    for (auto& e : x) e = offset + scale * u(g);
    return x;
  }
};

Tensor host(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::host(DType::kF32, std::move(shape));
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

using plain::Mat;
using plain::layer_norm;
using plain::linear;

double rel_l2(const Tensor& got, const Mat& want) { return plain::rel_l2(got.f32(), want); }

TEST(VisionCore, OneLayerClipTowerAndProjectorMatchAPlainImplementation) {
  // Sizes: a 2-layer tower run to its first layer (vision_feature_layer -2), 3x2 grid of 4-px
  // patches, 2 heads, class token dropped, text width 12.
  const int64_t d = 8, ff = 16, heads = 2, hd = d / heads, p = 4, gh = 3, gw = 2, C = 3, text_d = 12, proj = 12;
  const int64_t n_patch = gh * gw, n_tok = n_patch + 1;
  const double eps = 1e-5;
  VisionParams vp;
  vp.enabled = true;
  vp.patch_size = p;
  vp.n_embd = d;
  vp.n_ff = ff;
  vp.n_head = heads;
  vp.n_layer = 2;
  vp.n_layer_run = 1;
  vp.class_token = true;
  vp.pre_norm = true;
  vp.pos_h = gh;
  vp.pos_w = gw;
  vp.act = VisionParams::Act::kQuickGelu;
  vp.projector_act = VisionParams::Act::kGelu;
  vp.projector_hidden = proj;
  blocks::VisionNames n;
  n.patch_w = "patch";
  n.class_embedding = "cls";
  n.pos_embedding = "pos";
  n.pre_norm_w = "pre.w";
  n.pre_norm_b = "pre.b";
  n.ln1_w = "l{L}.ln1.w";
  n.ln1_b = "l{L}.ln1.b";
  n.ln2_w = "l{L}.ln2.w";
  n.ln2_b = "l{L}.ln2.b";
  n.q_w = "l{L}.q.w", n.q_b = "l{L}.q.b", n.k_w = "l{L}.k.w", n.k_b = "l{L}.k.b";
  n.v_w = "l{L}.v.w", n.v_b = "l{L}.v.b", n.o_w = "l{L}.o.w", n.o_b = "l{L}.o.b";
  n.fc1_w = "l{L}.fc1.w", n.fc1_b = "l{L}.fc1.b", n.fc2_w = "l{L}.fc2.w", n.fc2_b = "l{L}.fc2.b";
  n.proj1_w = "p1.w", n.proj1_b = "p1.b", n.proj2_w = "p2.w", n.proj2_b = "p2.b";

  Rng rng;
  std::map<std::string, std::vector<float>> v;
  Weights w;
  for (const TensorSpec& s : blocks::vision_specs(vp, n, text_d)) {
    const bool norm_w = s.name.find("ln") != std::string::npos || s.name.find("pre") != std::string::npos;
    const bool is_w = s.name.back() == 'w' && s.name.find(".w") != std::string::npos;
    v[s.name] = rng.v(static_cast<size_t>(shape_numel(s.shape)), norm_w && is_w ? 0.1f : 0.5f, norm_w && is_w ? 1.0f : 0.0f);
    w.put(s.name, host(v[s.name], s.shape));
  }
  image::ProcessedImage img;
  img.source = "pattern";
  img.height = gh * p, img.width = gw * p, img.patch_size = p, img.grid_h = gh, img.grid_w = gw;
  img.pixels = rng.v(static_cast<size_t>(C * img.height * img.width), 2.0f);

  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  const blocks::VisionContext ctx{**be, vp, n, w, nullptr};
  const Tensor got = blocks::image_features(ctx, img);
  ASSERT_EQ(got.dim(0), blocks::image_feature_count(vp, img));
  ASSERT_EQ(got.dim(1), text_d);

  // The plain implementation: conv as a direct sum over each patch, then CLIP's layer.
  Mat h(n_tok * d);
  for (int64_t o = 0; o < d; ++o) h[o] = v["cls"][o];
  for (int64_t py = 0; py < gh; ++py)
    for (int64_t px = 0; px < gw; ++px)
      for (int64_t o = 0; o < d; ++o) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx)
              s += v["patch"][((o * C + c) * p + ky) * p + kx] *
                   img.pixels[(c * img.height + py * p + ky) * img.width + px * p + kx];
        h[(1 + py * gw + px) * d + o] = s;
      }
  for (int64_t i = 0; i < n_tok * d; ++i) h[i] += v["pos"][i];
  h = layer_norm(h, n_tok, d, v["pre.w"], v["pre.b"], eps);
  Mat x = layer_norm(h, n_tok, d, v["l0.ln1.w"], v["l0.ln1.b"], eps);
  Mat q = linear(x, n_tok, d, v["l0.q.w"], v["l0.q.b"], d), k = linear(x, n_tok, d, v["l0.k.w"], v["l0.k.b"], d),
      vv = linear(x, n_tok, d, v["l0.v.w"], v["l0.v.b"], d);
  const Mat att = plain::attention(q, k, vv, n_tok, heads, hd);
  Mat o = linear(att, n_tok, d, v["l0.o.w"], v["l0.o.b"], d);
  for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
  x = layer_norm(h, n_tok, d, v["l0.ln2.w"], v["l0.ln2.b"], eps);
  Mat f = linear(x, n_tok, d, v["l0.fc1.w"], v["l0.fc1.b"], ff);
  for (auto& e : f) e = e / (1 + std::exp(-1.702 * e));
  f = linear(f, n_tok, ff, v["l0.fc2.w"], v["l0.fc2.b"], d);
  for (size_t i = 0; i < h.size(); ++i) h[i] += f[i];
  Mat sel(h.begin() + d, h.end());  // class token dropped
  Mat p1 = linear(sel, n_patch, d, v["p1.w"], v["p1.b"], proj);
  for (auto& e : p1) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
  const Mat want = linear(p1, n_patch, proj, v["p2.w"], v["p2.b"], text_d);
  // f32 against f64 through LayerNorms, a softmax over 7 tokens and 5 GEMMs of width <= 48:
  // measured 1.4e-7; the erf GELU in place of quick_gelu (below) gives 4.4e-3.
  const double err = rel_l2(got, want);
  EXPECT_LT(err, 5e-7) << "seed 1234";

  // Negative control: the same tower with the erf GELU in its MLP must miss by far more.
  VisionParams wrong = vp;
  wrong.act = VisionParams::Act::kGelu;
  const blocks::VisionContext bad{**be, wrong, n, w, nullptr};
  const double bad_err = rel_l2(blocks::image_features(bad, img), want);
  std::printf("tower rel_l2 %.3g, with the wrong GELU %.3g\n", err, bad_err);
  EXPECT_GT(bad_err, 100 * err + 1e-6);

  // The same weights as one fused qkv [3 * d, d] (q, k, v rows in that order) give the same
  // features: the split of the fused projection is right.
  VisionParams fused = vp;
  fused.fused_qkv = true;
  blocks::VisionNames fn = n;
  fn.qkv_w = "l{L}.qkv.w";
  fn.qkv_b = "l{L}.qkv.b";
  for (int l = 0; l < vp.n_layer; ++l) {
    const std::string L = "l" + std::to_string(l);
    std::vector<float> qkv_w, qkv_b;
    for (const char* part : {".q", ".k", ".v"}) {
      const auto& pw = v[L + part + ".w"];
      const auto& pb = v[L + part + ".b"];
      qkv_w.insert(qkv_w.end(), pw.begin(), pw.end());
      qkv_b.insert(qkv_b.end(), pb.begin(), pb.end());
    }
    w.put(L + ".qkv.w", host(qkv_w, {3 * d, d}));
    w.put(L + ".qkv.b", host(qkv_b, {3 * d}));
  }
  const blocks::VisionContext fctx{**be, fused, fn, w, nullptr};
  EXPECT_LT(rel_l2(blocks::image_features(fctx, img), want), 5e-7);
}

TEST(VisionCore, BicubicResampleMatchesTorchInterpolate) {
  // A [3, 4, 2] table to [5, 3]; want: torch 2.x F.interpolate(table.permute(2, 0, 1)[None],
  // size=(5, 3), mode="bicubic") in float64, permuted back (MoonViT's resampled positions).
  const std::vector<float> table = {
      -0.8, -0.7432702995054132, -0.5254242103319552, -0.41486444956367924, -0.1239151010208357, 0.00955172669287252,
      0.34530161315616525, 0.49499407048986654, 0.8647162926501206, -0.6726730405965065, -0.275034675911793,
      -0.10153772030085984, 0.32006336526426704, 0.5030509278574824, -0.7542029623229685, -0.5627521703464009,
      -0.1009876729990864, 0.09813337699737112, 0.5772448790330211, 0.7834026102825586, -0.4214927427252859,
      -0.20881807711117828, 0.301157072842543, 0.5199133485337808};
  const std::vector<double> want = {
      -0.9075677697992427, -0.7133276369470424, -0.3774093129347711, -0.27225195160604365, 0.3688949944052544,
      0.5125630775637409, -0.15296253492046807, -0.7224852621727398, -0.20764003928683164, 0.009513671606661613,
      -0.10984912446189699, 0.05246956864939487, 0.690809358947206, -0.6012008762512687, 0.01637515958486096,
      0.35421958051264224, -0.5896942872784565, -0.39929335796253884, 0.3814154655183448, -0.0951104958907731,
      0.07733432807297672, 0.35192148525648775, -0.18155060275439747, 0.02880891387417604, -0.05131296207857174,
      0.2919395324170452, 0.07921628154819686, 0.2764015041837363, 0.2540049063810142, 0.47465068336251337};
  const std::vector<float> got = blocks::resample_bicubic(table.data(), 3, 4, 2, 5, 3);
  ASSERT_EQ(got.size(), want.size());
  // The table went through float32 once: each value within a few f32 ulps of torch's f64.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  // The same grid gives the table back.
  const std::vector<float> same = blocks::resample_bicubic(table.data(), 3, 4, 2, 3, 4);
  for (size_t i = 0; i < table.size(); ++i) EXPECT_NEAR(same[i], table[i], 1e-6) << i;
}

TEST(VisionCore, Rope2dInterleavedMatchesMoonVit) {
  // x [6 tokens of a 2x3 grid, 2 heads, head_dim 8]; want: MoonViT's Rope2DPosEmb freqs_cis
  // (x and y interleaved per frequency, theta 10000) applied as its apply_rope does, in torch.
  std::vector<float> x = {-1.0, -0.63, -0.26, 0.10999999999999988, 0.48, 0.8500000000000001, -0.7800000000000002, -0.41000000000000014, -0.41000000000000014, -0.040000000000000036, 0.33000000000000007, 0.7000000000000002, -0.9299999999999997, -0.5600000000000005, -0.1900000000000004, 0.17999999999999972, 0.47000000000000064, 0.8399999999999999, -0.7900000000000009, -0.41999999999999993, -0.05000000000000071, 0.3200000000000003, 0.6899999999999995, -0.9399999999999995, -0.9399999999999995, -0.5700000000000003, -0.1999999999999993, 0.16999999999999993, 0.5399999999999991, 0.9100000000000001, -0.7199999999999989, -0.3500000000000014, -0.05999999999999872, 0.3099999999999987, 0.6799999999999997, -0.9499999999999993, -0.5800000000000018, -0.21000000000000085, 0.16000000000000014, 0.5300000000000011, 0.5300000000000011, 0.8999999999999986, -0.7300000000000004, -0.35999999999999943, 0.00999999999999801, 0.379999999999999, 0.75, -0.879999999999999, -0.5900000000000034, -0.21999999999999886, 0.14999999999999858, 0.519999999999996, 0.8900000000000006, -0.740000000000002, -0.36999999999999744, 0.0, 0.0, 0.36999999999999744, 0.740000000000002, -0.8900000000000006, -0.5200000000000031, -0.14999999999999858, 0.21999999999999886, 0.5899999999999963, 0.8800000000000026, -0.75, -0.38000000000000256, -0.00999999999999801, 0.35999999999999943, 0.7299999999999969, -0.8999999999999986, -0.5300000000000011, -0.5300000000000011, -0.1600000000000037, 0.21000000000000085, 0.5799999999999983, 0.9500000000000028, -0.6799999999999997, -0.3100000000000023, 0.060000000000002274, 0.3500000000000014, 0.7199999999999989, -0.9100000000000037, -0.5399999999999991, -0.1700000000000017, 0.20000000000000284, 0.5700000000000003, 0.9399999999999977, 0.9399999999999977, -0.6899999999999977, -0.3200000000000003, 0.04999999999999716, 0.4200000000000017, 0.7899999999999991, -0.8400000000000034, -0.46999999999999886};
  const std::vector<double> want = {-1.0, -0.6299999952316284, -0.25999999046325684, 0.10999999940395355, 0.47999998927116394, 0.8500000238418579, -0.7799999713897705, -0.4099999964237213, -0.4099999964237213, -0.03999999910593033, 0.33000001311302185, 0.699999988079071, -0.9300000071525574, -0.5600000023841858, -0.1899999976158142, 0.18000000715255737, -0.4528934955596924, 0.8493452668190002, -0.7900000214576721, -0.41999998688697815, -0.05319744721055031, 0.31948399543762207, 0.6899999976158142, -0.9399999976158142, -0.02824571169912815, -1.0989550352096558, -0.20000000298023224, 0.17000000178813934, 0.53087317943573, 0.9153544306755066, -0.7200000286102295, -0.3499999940395355, -0.2569133937358856, -0.18356336653232574, 0.6800000071525574, -0.949999988079071, -0.5756842494010925, -0.22155722975730896, 0.1599999964237213, 0.5299999713897705, -1.0389255285263062, 0.10739543288946152, -0.7300000190734863, -0.36000001430511475, 0.002398506971076131, 0.38012397289276123, 0.75, -0.8799999952316284, -0.5899999737739563, -0.2199999988079071, -0.35651952028274536, 0.40717780590057373, 0.8899999856948853, -0.7400000095367432, -0.3699814975261688, -0.003699938300997019, 0.0, 0.3700000047683716, 1.1487327814102173, 0.14181949198246002, -0.5199999809265137, -0.15000000596046448, 0.21408909559249878, 0.5921704173088074, 1.1065691709518433, 0.33526772260665894, -0.1969001591205597, -0.32516199350357056, 0.3526821434497833, 0.7335634827613831, -0.8946550488471985, -0.5389732718467712, -0.15172484517097473, -0.532427966594696, -0.3745896816253662, 0.4900842308998108, 0.956752359867096, -0.6704661250114441, -0.31058448553085327, 0.05689705163240433, -0.8003455400466919, 0.018628332763910294, -0.037280745804309845, -1.0575017929077148, -0.17396573722362518, 0.19656023383140564, 0.5605716705322266, 0.9456529021263123, 0.23623715341091156, 1.1418808698654175, -0.21497027575969696, -0.2422555834054947, 0.40411704778671265, 0.7982414960861206, -0.8352580666542053, -0.4783763587474823};
  blocks::rope_2d_interleaved(x.data(), 2, 3, 2, 8, 10000.0);
  // f32 sin/cos of angles below 3 rad against torch's f32: a few ulps.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(x[i], want[i], 1e-6) << i;
}

TEST(VisionCore, MergeGroupsKByKBlocks) {
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  // A 2x4 grid of 1-wide rows holding their index; k = 2 gives 2 rows of 4.
  Tensor x = host({0, 1, 2, 3, 4, 5, 6, 7}, {8, 1});
  const Tensor m = blocks::merge_patches(**be, x, 2, 4, 2);
  ASSERT_EQ(m.shape(), (Shape{2, 4}));
  const std::vector<float> want = {0, 1, 4, 5, 2, 3, 6, 7};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), m.f32()));
}

TEST(VisionCore, PlaceholdersExpandAndFeaturesLandOnThem) {
  const int32_t img = 9;
  const std::vector<int32_t> ids = {1, img, 2, 3, img};
  const std::vector<int64_t> counts = {2, 1};
  auto e = blocks::expand_image_placeholders(ids, img, counts);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<int32_t>{1, img, img, 2, 3, img}));
  // No placeholder: the images come before the text.
  auto before = blocks::expand_image_placeholders(std::vector<int32_t>{1, 2}, img, counts);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(*before, (std::vector<int32_t>{img, img, img, 1, 2}));
  EXPECT_FALSE(blocks::expand_image_placeholders(std::vector<int32_t>{img}, img, counts).ok());

  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  Tensor hidden = host(std::vector<float>(6, -1.0f), {6, 1});
  const std::vector<Tensor> feats = {host({10, 11}, {2, 1}), host({12}, {1, 1})};
  ASSERT_TRUE(blocks::place_image_features(**be, *e, img, feats, hidden).ok());
  const std::vector<float> want = {-1, 10, 11, -1, -1, 12};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), hidden.f32()));
  // One row short: refused.
  EXPECT_FALSE(blocks::place_image_features(**be, ids, img, feats, hidden).ok());
}

}  // namespace
}  // namespace dayzero::model
