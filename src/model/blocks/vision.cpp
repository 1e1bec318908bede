// The vision-tower core (vision.h): embeddings, encoder layers, merger, projector, placement.
#include "model/blocks/vision.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "model/blocks/block_util.h"

namespace dayzero::model::blocks {
namespace {

using Act = VisionParams::Act;

backend::GeluKind gelu_kind(Act a) {
  switch (a) {
    case Act::kGelu: return backend::GeluKind::kErf;
    case Act::kGeluTanh: return backend::GeluKind::kTanh;
    case Act::kQuickGelu: return backend::GeluKind::kQuick;
  }
  return backend::GeluKind::kErf;
}

const Tensor* maybe(const Weights& w, const std::string& name) { return name.empty() ? nullptr : &w.get(name); }

// y [rows, out] = x · W^T + b
Tensor linear(backend::Backend& be, const Weights& w, const std::string& weight, const std::string& bias,
              const Tensor& x) {
  const Tensor& wt = w.get(weight);
  Tensor y = be.empty(DType::kF32, {x.numel() / wt.dim(1), wt.dim(0)});
  be.matmul(x, wt, y);
  if (!bias.empty()) be.add_bias(w.get(bias), y);
  return y;
}

void layernorm(const VisionContext& ctx, const std::string& w, const std::string& b, const Tensor& x, Tensor& y,
               double eps) {
  ctx.be.layernorm(x, ctx.w.get(w), maybe(ctx.w, b), static_cast<float>(eps), y);
}

}  // namespace

std::vector<TensorSpec> vision_specs(const VisionParams& vp, const VisionNames& n, int64_t n_text_embd) {
  const int64_t d = vp.n_embd, p = vp.patch_size;
  std::vector<TensorSpec> s;
  auto add = [&](const std::string& name, Shape shape, bool skip = false) {
    if (name.empty()) return;
    TensorSpec t{name, std::move(shape), ShardRule::kReplicated, -1};
    t.component = name == n.proj_norm_w || name == n.proj_norm_b || name == n.proj1_w || name == n.proj1_b ||
                          name == n.proj2_w || name == n.proj2_b
                      ? Component::kProjector
                      : Component::kVision;
    t.skip_load = skip;
    s.push_back(std::move(t));
  };
  add(n.patch_w, {d, vp.n_channels, p, p});
  if (vp.patch_bias) add(n.patch_b, {d});
  if (vp.class_token) add(n.class_embedding, {d});
  if (vp.pos_embed == VisionParams::PosEmbed::kLearned)
    add(n.pos_embedding, {vp.pos_h * vp.pos_w + (vp.class_token ? 1 : 0), d});
  if (vp.pos_embed == VisionParams::PosEmbed::kLearnedResampled) add(n.pos_embedding, {vp.pos_h, vp.pos_w, d});
  if (vp.pre_norm) {
    add(n.pre_norm_w, {d});
    add(n.pre_norm_b, {d});
  }
  for (int l = 0; l < vp.n_layer; ++l) {
    const bool skip = l >= vp.n_layer_run;  // after the feature layer: claimed, never read
    add(L(n.ln1_w, l), {d}, skip);
    add(L(n.ln1_b, l), {d}, skip);
    if (vp.fused_qkv) {
      add(L(n.qkv_w, l), {3 * d, d}, skip);
      add(L(n.qkv_b, l), {3 * d}, skip);
    } else {
      for (const auto* name : {&n.q_w, &n.k_w, &n.v_w}) add(L(*name, l), {d, d}, skip);
      for (const auto* name : {&n.q_b, &n.k_b, &n.v_b}) add(L(*name, l), {d}, skip);
    }
    add(L(n.o_w, l), {d, d}, skip);
    add(L(n.o_b, l), {d}, skip);
    add(L(n.ln2_w, l), {d}, skip);
    add(L(n.ln2_b, l), {d}, skip);
    add(L(n.fc1_w, l), {vp.n_ff, d}, skip);
    add(L(n.fc1_b, l), {vp.n_ff}, skip);
    add(L(n.fc2_w, l), {d, vp.n_ff}, skip);
    add(L(n.fc2_b, l), {d}, skip);
  }
  add(n.post_norm_w, {d}, !vp.post_norm);
  add(n.post_norm_b, {d}, !vp.post_norm);
  const int64_t merged = d * vp.merge_kernel * vp.merge_kernel;
  if (vp.projector_pre_norm) {
    add(n.proj_norm_w, {d});
    add(n.proj_norm_b, {d});
  }
  add(n.proj1_w, {vp.projector_hidden, merged});
  add(n.proj1_b, {vp.projector_hidden});
  add(n.proj2_w, {n_text_embd, vp.projector_hidden});
  add(n.proj2_b, {n_text_embd});
  return s;
}

int64_t image_feature_count(const VisionParams& vp, const image::ProcessedImage& img) {
  const int64_t k = vp.merge_kernel;
  const bool keeps_class = vp.class_token && !vp.drop_class_token;
  return (img.grid_h / k) * (img.grid_w / k) + (keeps_class ? 1 : 0);
}

std::vector<float> unfold_patches(const image::ProcessedImage& img, int64_t c_n, int64_t p) {
  const int64_t gh = img.grid_h, gw = img.grid_w, H = img.height, W = img.width;
  DZ_CHECK(gh * p == H && gw * p == W && static_cast<int64_t>(img.pixels.size()) == c_n * H * W,
           img.source << ": pixels [" << img.pixels.size() << "] are not [" << c_n << ", " << gh << "*" << p << ", "
                      << gw << "*" << p << "]");
  std::vector<float> out(static_cast<size_t>(gh * gw * c_n * p * p));
  float* o = out.data();
  for (int64_t gy = 0; gy < gh; ++gy)
    for (int64_t gx = 0; gx < gw; ++gx)
      for (int64_t c = 0; c < c_n; ++c)
        for (int64_t ky = 0; ky < p; ++ky) {
          const float* src = img.pixels.data() + (c * H + gy * p + ky) * W + gx * p;
          std::memcpy(o, src, static_cast<size_t>(p) * sizeof(float));
          o += p;
        }
  return out;
}

std::vector<float> resample_bicubic(const float* table, int64_t th, int64_t tw, int64_t d, int64_t oh, int64_t ow) {
  // torch's upsample_bicubic2d: source = (dst + 0.5) * in / out - 0.5 (not clamped), four taps
  // from floor(source) - 1 with the border repeated, Keys' kernel with A = -0.75.
  constexpr double A = -0.75;
  auto cc1 = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto cc2 = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  struct Taps {
    int64_t idx[4];
    double w[4];
  };
  auto taps = [&](int64_t dst, int64_t in, int64_t out) {
    const double src = (static_cast<double>(dst) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    const auto i0 = static_cast<int64_t>(std::floor(src));
    const double t = src - static_cast<double>(i0);
    Taps r{{}, {cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)}};
    for (int k = 0; k < 4; ++k) r.idx[k] = std::clamp<int64_t>(i0 - 1 + k, 0, in - 1);
    return r;
  };
  std::vector<float> out(static_cast<size_t>(oh * ow * d));
  for (int64_t y = 0; y < oh; ++y) {
    const Taps ty = taps(y, th, oh);
    for (int64_t x = 0; x < ow; ++x) {
      const Taps tx = taps(x, tw, ow);
      for (int64_t c = 0; c < d; ++c) {
        double s = 0;
        for (int a = 0; a < 4; ++a) {
          double row = 0;
          for (int b = 0; b < 4; ++b) row += tx.w[b] * table[(ty.idx[a] * tw + tx.idx[b]) * d + c];
          s += ty.w[a] * row;
        }
        out[static_cast<size_t>((y * ow + x) * d + c)] = static_cast<float>(s);
      }
    }
  }
  return out;
}

void rope_2d_interleaved(float* x, int64_t grid_h, int64_t grid_w, int64_t n_head, int64_t head_dim, double theta) {
  DZ_CHECK(head_dim % 4 == 0, "2-D rotary embedding of head_dim " << head_dim << " (needs a multiple of 4)");
  const int64_t n_freq = head_dim / 4;
  std::vector<float> freq(static_cast<size_t>(n_freq));
  // As torch computes them: f32 of 1 / theta^(4i / head_dim), angles f32 products.
  for (int64_t i = 0; i < n_freq; ++i)
    freq[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(4 * i) / static_cast<double>(head_dim)));
  // cos and sin of every (token, pair) once, shared by the heads.
  const int64_t n_pair = head_dim / 2;
  std::vector<float> cs(static_cast<size_t>(2 * n_pair));
  for (int64_t r = 0; r < grid_h * grid_w; ++r) {
    const float pos[2] = {static_cast<float>(r % grid_w), static_cast<float>(r / grid_w)};  // (col, row)
    for (int64_t j = 0; j < n_pair; ++j) {
      const float angle = pos[j % 2] * freq[j / 2];
      cs[2 * j] = std::cos(angle);
      cs[2 * j + 1] = std::sin(angle);
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (r * n_head + h) * head_dim;
      for (int64_t j = 0; j < n_pair; ++j) {
        const float c = cs[2 * j], s = cs[2 * j + 1], a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * c - b * s;
        v[2 * j + 1] = a * s + b * c;
      }
    }
  }
}

Tensor vision_tower(const VisionContext& ctx, const image::ProcessedImage& img) {
  const VisionParams& vp = ctx.vp;
  const VisionNames& n = ctx.names;
  auto& be = ctx.be;
  const int64_t d = vp.n_embd, p = vp.patch_size, n_patch = img.grid_h * img.grid_w;
  const int64_t cls = vp.class_token ? 1 : 0, n_tok = n_patch + cls;
  DZ_CHECK(img.patch_size == p, img.source << ": patch size " << img.patch_size << ", the tower's is " << p);
  DZ_CHECK(vp.rope == VisionParams::Rope2d::kNone || !vp.class_token, "2-D rotary embeddings with a class token");

  // Patch embedding: conv with stride = kernel = p is a GEMM of unfolded patches with the
  // conv weight viewed as [n_embd, C * p * p].
  const std::vector<float> cols = unfold_patches(img, vp.n_channels, p);
  Tensor host = Tensor::host(DType::kF32, {n_patch, vp.n_channels * p * p});
  std::memcpy(host.f32(), cols.data(), cols.size() * sizeof(float));
  Tensor hidden = be.empty(DType::kF32, {n_tok, d});
  Tensor patches = hidden.rows(cls, n_tok);
  be.matmul(be.to_device(host), ctx.w.get(n.patch_w).reshape({d, vp.n_channels * p * p}), patches);
  if (vp.patch_bias) be.add_bias(ctx.w.get(n.patch_b), patches);
  if (cls) {
    Tensor row = hidden.rows(0, 1);
    be.copy(ctx.w.get(n.class_embedding), row);
  }
  switch (vp.pos_embed) {
    case VisionParams::PosEmbed::kNone: break;
    case VisionParams::PosEmbed::kLearned:
      DZ_CHECK(img.grid_h == vp.pos_h && img.grid_w == vp.pos_w,
               img.source << ": a " << img.grid_h << "x" << img.grid_w << " patch grid for a learned " << vp.pos_h
                          << "x" << vp.pos_w << " position table");
      be.add(ctx.w.get(n.pos_embedding), hidden);
      break;
    case VisionParams::PosEmbed::kLearnedResampled: {
      DZ_CHECK(!cls, "a resampled position table has no class-token row");
      const Tensor& table = ctx.w.get(n.pos_embedding);  // [pos_h, pos_w, d]
      if (img.grid_h == vp.pos_h && img.grid_w == vp.pos_w) {
        be.add(table, hidden);
        break;
      }
      Tensor host_table = Tensor::host(DType::kF32, table.shape());
      be.to_host(table, host_table);
      const std::vector<float> r =
          resample_bicubic(host_table.f32(), vp.pos_h, vp.pos_w, d, img.grid_h, img.grid_w);
      Tensor pos = Tensor::host(DType::kF32, {n_patch, d});
      std::copy(r.begin(), r.end(), pos.f32());
      be.add(be.to_device(pos), hidden);
      break;
    }
  }
  if (vp.pre_norm) layernorm(ctx, n.pre_norm_w, n.pre_norm_b, hidden, hidden, vp.norm_eps);
  emit(ctx.sink, "vision.embed", hidden);
  VisionContext grid_ctx = ctx;
  grid_ctx.grid_h = img.grid_h;
  grid_ctx.grid_w = img.grid_w;
  for (int l = 0; l < vp.n_layer_run; ++l) vision_encoder_layer(grid_ctx, l, hidden);
  if (vp.post_norm) layernorm(ctx, n.post_norm_w, n.post_norm_b, hidden, hidden, vp.norm_eps);
  return hidden;
}

void vision_encoder_layer(const VisionContext& ctx, int layer, Tensor& hidden) {
  const VisionNames& n = ctx.names;
  auto& be = ctx.be;
  Tensor x = be.empty(DType::kF32, hidden.shape());
  layernorm(ctx, L(n.ln1_w, layer), L(n.ln1_b, layer), hidden, x, ctx.vp.norm_eps);
  Tensor attn = vision_attention(ctx, layer, x);
  be.add(attn, hidden);
  layernorm(ctx, L(n.ln2_w, layer), L(n.ln2_b, layer), hidden, x, ctx.vp.norm_eps);
  Tensor h = linear(be, ctx.w, L(n.fc1_w, layer), L(n.fc1_b, layer), x);
  be.gelu(gelu_kind(ctx.vp.act), h, h);
  Tensor out = linear(be, ctx.w, L(n.fc2_w, layer), L(n.fc2_b, layer), h);
  be.add(out, hidden);
  emit(ctx.sink, "vision.layers." + std::to_string(layer) + ".layer_out", hidden);
}

Tensor merge_patches(backend::Backend& be, const Tensor& x, int64_t gh, int64_t gw, int64_t k) {
  if (k == 1) return x;
  DZ_CHECK(gh % k == 0 && gw % k == 0, "a " << gh << "x" << gw << " grid does not merge in " << k << "x" << k);
  const int64_t d = x.dim(1), oh = gh / k, ow = gw / k;
  Tensor out = be.empty(DType::kF32, {oh * ow, k * k * d});
  Tensor flat = out.reshape({oh * ow * k * k, d});
  for (int64_t by = 0; by < oh; ++by)
    for (int64_t bx = 0; bx < ow; ++bx)
      for (int64_t dy = 0; dy < k; ++dy)
        for (int64_t dx = 0; dx < k; ++dx) {
          const int64_t src = (by * k + dy) * gw + bx * k + dx, dst = ((by * ow + bx) * k + dy) * k + dx;
          Tensor to = flat.rows(dst, dst + 1);
          be.copy(x.rows(src, src + 1), to);
        }
  return out;
}

Tensor image_features(const VisionContext& ctx, const image::ProcessedImage& img) {
  const VisionParams& vp = ctx.vp;
  const VisionNames& n = ctx.names;
  auto& be = ctx.be;
  Tensor tower = vision_tower(ctx, img);
  const int64_t cls = vp.class_token ? 1 : 0;
  Tensor selected = vp.drop_class_token ? tower.rows(cls, tower.dim(0)) : tower;
  emit(ctx.sink, "vision.selected", selected);
  DZ_CHECK(!(cls && !vp.drop_class_token && vp.merge_kernel > 1), "a class token cannot be merged");
  if (vp.projector_pre_norm) {
    // Per patch, so before the merge's concatenation (a row-wise norm commutes with the regrouping).
    Tensor normed = be.empty(DType::kF32, selected.shape());
    layernorm(ctx, n.proj_norm_w, n.proj_norm_b, selected, normed, vp.projector_norm_eps);
    selected = normed;
  }
  Tensor x = merge_patches(be, selected, img.grid_h, img.grid_w, vp.merge_kernel);
  if (vp.merge_kernel > 1) emit(ctx.sink, "vision.merged", x);
  Tensor h = linear(be, ctx.w, n.proj1_w, n.proj1_b, x);
  be.gelu(gelu_kind(vp.projector_act), h, h);
  Tensor out = linear(be, ctx.w, n.proj2_w, n.proj2_b, h);
  emit(ctx.sink, "projector_out", out);
  return out;
}

Status place_image_features(backend::Backend& be, std::span<const int32_t> tokens, int32_t image_token,
                            std::span<const Tensor> features, Tensor& hidden) {
  int64_t want = 0, have = 0;
  for (const Tensor& f : features) want += f.dim(0);
  for (int32_t t : tokens) have += t == image_token;
  if (want != have)
    return Status::InvalidArgument("the prompt has " + std::to_string(have) + " image placeholder positions (token " +
                                   std::to_string(image_token) + ") for " + std::to_string(want) +
                                   " image feature rows");
  size_t img = 0;
  int64_t row_in_img = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] != image_token) continue;
    while (row_in_img == features[img].dim(0)) ++img, row_in_img = 0;
    Tensor dst = hidden.rows(static_cast<int64_t>(t), static_cast<int64_t>(t) + 1);
    be.copy(features[img].rows(row_in_img, row_in_img + 1), dst);
    ++row_in_img;
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> expand_image_placeholders(std::span<const int32_t> ids, int32_t image_token,
                                                       std::span<const int64_t> counts) {
  size_t placeholders = 0;
  for (int32_t t : ids) placeholders += t == image_token;
  std::vector<int32_t> out;
  if (placeholders == 0) {
    for (int64_t c : counts) out.insert(out.end(), static_cast<size_t>(c), image_token);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  if (placeholders != counts.size())
    return Status::InvalidArgument("the prompt has " + std::to_string(placeholders) + " image placeholders for " +
                                   std::to_string(counts.size()) + " images");
  size_t i = 0;
  for (int32_t t : ids) {
    if (t == image_token) out.insert(out.end(), static_cast<size_t>(counts[i++]), image_token);
    else out.push_back(t);
  }
  return out;
}

}  // namespace dayzero::model::blocks
