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
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/json.h"
#include "image/processor.h"
#include "kernels/ops.h"
#include "model/blocks/vision.h"

using namespace dayzero;

namespace {

// Wall-clock and process CPU time of one step, each the median over the runs. On a shared
// machine the wall time counts the other processes' share of the cores; the CPU time does not.
struct Timing {
  double wall_ms = 0, cpu_ms = 0;
};

double cpu_now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

Timing timed(int runs, const std::function<void()>& f) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now_ms();
    f();
    cpu.push_back(cpu_now_ms() - c0);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

double median_ms(int runs, const std::function<void()>& f) { return timed(runs, f).wall_ms; }

}  // namespace

// The tower's prefill against its matmuls alone (see the file comment).
Timing tower_bench(int runs, int layers, int grid, int threads) {
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
  backend::BackendOptions bo;
  bo.threads = threads;
  auto be = backend::make_backend(bo);
  if (!be.ok()) std::abort();
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
  const Timing tower = timed(runs, [&] {
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
  const Timing gemm = timed(runs, [&] {
    for (size_t i = 0; i < shapes.size(); ++i) (*be)->matmul(xs[i], ws[i], ys[i]);
    (*be)->synchronize();
  });
  const double tower_ms = tower.wall_ms, gemm_ms = gemm.wall_ms;
  const double tower_gf = flops / (tower_ms * 1e6), gemm_gf = gemm_flops / (gemm_ms * 1e6);
  const double tower_cpu_gf = flops / (tower.cpu_ms * 1e6), gemm_cpu_gf = gemm_flops / (gemm.cpu_ms * 1e6);
  std::printf("tower %d layer(s) of width %lld on %dx%d patches, %s: %8.3f ms, %.1f GFLOP/s; GEMM-only of the same "
              "shapes %8.3f ms, %.1f GFLOP/s; ratio %.2f\n",
              layers, (long long)d, grid, grid, (*be)->describe().c_str(), tower_ms, tower_gf, gemm_ms, gemm_gf,
              tower_gf / gemm_gf);
  std::printf("  by CPU time: tower %8.3f ms, %.1f GFLOP/s per CPU-second; GEMM-only %8.3f ms, %.1f; ratio %.2f\n",
              tower.cpu_ms, tower_cpu_gf, gemm.cpu_ms, gemm_cpu_gf, tower_cpu_gf / gemm_cpu_gf);
  // Where the rest goes: one layer's non-GEMM ops on their own, at the tower's shapes.
  {
    const int64_t nh = vp.n_head, hd = d / nh;
    std::vector<float> q(size_t(t * d)), kv(size_t(t * d)), o(size_t(t * d)), big(size_t(t * f)), wn(size_t(d), 1.0f);
    for (size_t i = 0; i < q.size(); ++i) q[i] = kv[i] = static_cast<float>((i * 2654435761u) >> 24) / 256.0f - 0.5f;
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i * 2654435761u) >> 24) / 64.0f - 2.0f;
    const double attn_ms = timed(runs, [&] {
      kernels::cpu::attention_full(t, nh, nh, hd, q.data(), kv.data(), kv.data(), 0.1f, o.data());
    }).cpu_ms;
    const double gelu_ms = timed(runs, [&] {
      kernels::cpu::gelu(t * f, kernels::cpu::GeluKind::kTanh, big.data(), big.data());
    }).cpu_ms;
    const double ln_ms = timed(runs, [&] {
      kernels::cpu::layernorm(t, d, q.data(), wn.data(), wn.data(), 1e-6f, o.data());
    }).cpu_ms;
    const double rope_ms = timed(runs, [&] {
      model::blocks::rope_2d_interleaved(q.data(), grid, grid, nh, hd, 10000.0);
    }).cpu_ms;
    std::printf("  per layer, CPU time: attention_full %8.3f ms (%.1f GFLOP/s), gelu_tanh [%lld, %lld] %8.3f ms, layernorm %8.3f ms, "
                "2-D rope %8.3f ms\n",
                attn_ms, 4.0 * double(t) * double(t) * double(d) / (attn_ms * 1e6), (long long)t, (long long)f, gelu_ms,
                ln_ms, rope_ms);
  }
  return tower;
}

int main(int argc, char** argv) {
  int runs = 5, layers = 2, grid = 32, threads = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--tower-layers") == 0) layers = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(0, std::atoi(argv[i + 1]));
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
  // A synthetic 1920x1080 image, and one of grid*14 pixels a side: what the Kimi-K2.5
  // processor turns into the tower bench's grid x grid patches (no resize, no padding).
  auto synthetic = [](int64_t w, int64_t h) {
    image::RgbImage img;
    img.width = w;
    img.height = h;
    img.rgb.resize(size_t(w) * size_t(h) * 3);
    for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t((i * 2654435761u) >> 24);
    return img;
  };
  const image::RgbImage full_hd = synthetic(1920, 1080), tower_sized = synthetic(int64_t{grid} * 14, int64_t{grid} * 14);
  Timing kimi_tower_sized;
  for (const char* proc : {"llava-1.5", "kimi_k25"}) {
    const std::string dir = data + "/processors/" + proc;
    auto p = image::load_image_processor(dir);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().message().c_str());
      return 2;
    }
    for (const image::RgbImage* img : {&full_hd, &tower_sized}) {
      image::ProcessedImage out;
      const Timing tm = timed(runs, [&] {
        auto r = (*p)->process(*img, "synthetic");
        if (!r.ok()) std::abort();
        out = std::move(*r);
      });
      if (img == &tower_sized && std::string(proc) == "kimi_k25") kimi_tower_sized = tm;
      std::printf("process %lldx%lld %-10s -> %lldx%lld %8.3f ms (CPU %8.3f ms)\n", (long long)img->width,
                  (long long)img->height, proc, (long long)out.width, (long long)out.height, tm.wall_ms, tm.cpu_ms);
    }
  }
  const Timing tower = tower_bench(runs, layers, grid, threads);
  std::printf("preprocessing of the tower's %dx%d-patch image (kimi_k25) vs the tower: %.3f ms vs %.1f ms of CPU time "
              "(%.2f%%)\n",
              grid, grid, kimi_tower_sized.cpu_ms, tower.cpu_ms, 100.0 * kimi_tower_sized.cpu_ms / tower.cpu_ms);
  return 0;
}
