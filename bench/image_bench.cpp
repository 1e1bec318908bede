// Image preprocessing time per image: decode of a committed PNG and JPEG, and the CLIP
// (llava-1.5 settings) and Kimi-K2.5 (defaults) processors on a synthetic 1920x1080 RGB image;
// then the vision tower's prefill: a MoonViT-shaped tower (Kimi-K2.5's width 1152, 16 heads,
// ffn 4304, --tower-layers layers, default 2) with random weights through blocks::vision_tower
// on a --grid x --grid patch image (default 32: 1024 patches), its GFLOP/s (matmul FLOPs plus
// attention's 4 n^2 d per layer) against the GEMM-only figure of the same matmul shapes in the
// same run. Prints the median of --runs runs per step. Not a test: figures go to docs/images.md.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/json.h"
#include "image/processor.h"
#include "model/blocks/vision.h"

using namespace dayzero;

namespace {

double median_ms(int runs, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

// The tower's prefill against its matmuls alone (see the file comment).
int tower_bench(int runs, int layers, int grid) {
  model::VisionParams vp;
  vp.enabled = true;
  vp.n_embd = 1152, vp.n_head = 16, vp.n_ff = 4304, vp.n_layer = layers, vp.n_layer_run = layers;
  vp.patch_size = 14, vp.n_channels = 3, vp.patch_bias = true;
  vp.pos_embed = model::VisionParams::PosEmbed::kLearnedResampled, vp.pos_h = vp.pos_w = 64;
  vp.rope = model::VisionParams::Rope2d::kInterleaved, vp.fused_qkv = true;
  vp.act = model::VisionParams::Act::kGeluTanh, vp.post_norm = true;
  model::blocks::VisionNames n;
  const std::string l = "blk.{L}.";
  n.patch_w = "patch.w", n.patch_b = "patch.b", n.pos_embedding = "pos";
  n.ln1_w = l + "ln1.w", n.ln1_b = l + "ln1.b", n.ln2_w = l + "ln2.w", n.ln2_b = l + "ln2.b";
  n.qkv_w = l + "qkv.w", n.qkv_b = l + "qkv.b", n.o_w = l + "o.w", n.o_b = l + "o.b";
  n.fc1_w = l + "fc1.w", n.fc1_b = l + "fc1.b", n.fc2_w = l + "fc2.w", n.fc2_b = l + "fc2.b";
  n.post_norm_w = "post.w", n.post_norm_b = "post.b";
  auto be = backend::make_backend({});
  if (!be.ok()) return 2;
  model::Weights w;
  uint32_t state = 12345;
  for (const auto& spec : model::blocks::vision_specs(vp, n, 1152)) {
    if (spec.component != model::Component::kVision) continue;
    Tensor t = Tensor::host(DType::kF32, spec.shape);
    const bool norm = spec.shape.size() == 1 && spec.name.find(".w") != std::string::npos;
    for (int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.f32()[i] = norm ? 1.0f : (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.05f;
    }
    w.put(spec.name, (*be)->to_device(t));
  }
  image::ProcessedImage img;
  img.source = "synthetic";
  img.patch_size = 14, img.grid_h = img.grid_w = grid, img.height = img.width = grid * 14;
  img.pixels.resize(size_t(3) * img.height * img.width);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<float>((i * 2654435761u) >> 24) / 128.0f - 1;
  const model::blocks::VisionContext ctx{**be, vp, n, w, nullptr};
  const int64_t t = int64_t{grid} * grid, d = vp.n_embd, f = vp.n_ff;
  // (M, N, K) of every matmul: patch embed, then per layer qkv, o, fc1, fc2.
  std::vector<std::array<int64_t, 3>> shapes = {{t, d, 3 * 14 * 14}};
  for (int i = 0; i < layers; ++i)
    for (auto s : {std::array<int64_t, 3>{t, 3 * d, d}, {t, d, d}, {t, f, d}, {t, d, f}}) shapes.push_back(s);
  double flops = 0;
  for (const auto& s : shapes) flops += 2.0 * double(s[0]) * double(s[1]) * double(s[2]);
  const double gemm_flops = flops;
  flops += 4.0 * double(t) * double(t) * double(d) * layers;  // q k^T and p v
  const double tower_ms = median_ms(runs, [&] {
    Tensor out = model::blocks::vision_tower(ctx, img);
    (*be)->synchronize();
  });
  // The same shapes through matmul alone, operands allocated once.
  auto filled = [&](Shape shape) {
    Tensor h = Tensor::host(DType::kF32, shape);
    for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = static_cast<float>(i % 97) * 0.001f - 0.05f;
    return (*be)->to_device(h);
  };
  std::vector<Tensor> xs, ws, ys;
  for (const auto& s : shapes) {
    xs.push_back(filled({s[0], s[2]}));
    ws.push_back(filled({s[1], s[2]}));
    ys.push_back((*be)->empty(DType::kF32, {s[0], s[1]}));
  }
  const double gemm_ms = median_ms(runs, [&] {
    for (size_t i = 0; i < shapes.size(); ++i) (*be)->matmul(xs[i], ws[i], ys[i]);
    (*be)->synchronize();
  });
  const double tower_gf = flops / (tower_ms * 1e6), gemm_gf = gemm_flops / (gemm_ms * 1e6);
  std::printf("tower %d layer(s) of width %lld on %dx%d patches: %8.3f ms, %.1f GFLOP/s; GEMM-only of the same "
              "shapes %8.3f ms, %.1f GFLOP/s; ratio %.2f\n",
              layers, (long long)d, grid, grid, tower_ms, tower_gf, gemm_ms, gemm_gf, tower_gf / gemm_gf);
  return 0;
}

int main(int argc, char** argv) {
  int runs = 5, layers = 2, grid = 32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--tower-layers") == 0) layers = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--grid") == 0) grid = std::max(2, std::atoi(argv[i + 1]) / 2 * 2);
  }
  const std::string data = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/images";
  for (const char* f : {"rgb_nonsquare.png", "photo.jpg"}) {
    const std::string path = data + "/" + f;
    const double ms = median_ms(runs, [&] {
      auto r = image::decode_rgb(path, 1 << 30);
      if (!r.ok()) std::abort();
    });
    std::printf("decode %-18s %8.3f ms\n", f, ms);
  }
  image::RgbImage img;
  img.width = 1920;
  img.height = 1080;
  img.rgb.resize(size_t(img.width) * img.height * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t((i * 2654435761u) >> 24);
  for (const char* proc : {"llava-1.5", "kimi_k25"}) {
    const std::string dir = data + "/processors/" + proc;
    auto p = image::load_image_processor(dir);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().message().c_str());
      return 2;
    }
    image::ProcessedImage out;
    const double ms = median_ms(runs, [&] {
      auto r = (*p)->process(img, "synthetic");
      if (!r.ok()) std::abort();
      out = std::move(*r);
    });
    std::printf("process 1920x1080 %-10s -> %lldx%lld %8.3f ms\n", proc, (long long)out.width, (long long)out.height, ms);
  }
  return tower_bench(runs, layers, grid);
}
