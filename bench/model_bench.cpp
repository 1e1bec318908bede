// Model-level benchmark (not a test): prints, measured in one run on this machine,
//  1. checkpoint load throughput vs a plain sequential read of the same files, both with a
//     warm page cache (target ratio >= 0.8);
//  2. prefill GFLOP/s of a model with hidden size >= 1024 vs the GEMM path alone at the same
//     shapes (target ratio >= 0.5).
// Usage: model_bench [--dir DIR] [--tokens N] [--threads T] [--dtype bfloat16|float32].
// The model is generated once per folder.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/clock.h"
#include "kernels/ops.h"
#include "tools/make_model.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

double seconds_since(int64_t t0) { return static_cast<double>(monotonic_ns() - t0) * 1e-9; }

// Reads every file front to back into one reused buffer: the ceiling for loading.
double sequential_read_seconds(const std::vector<std::string>& files, uint64_t* bytes) {
  std::vector<char> buf(16 << 20);
  *bytes = 0;
  const int64_t t0 = monotonic_ns();
  for (const auto& f : files) {
    const int fd = open(f.c_str(), O_RDONLY);
    ssize_t n;
    while ((n = read(fd, buf.data(), buf.size())) > 0) *bytes += static_cast<uint64_t>(n);
    close(fd);
  }
  return seconds_since(t0);
}

// Reads every file into newly allocated memory of twice its size (the f32 the loader must
// produce from bf16), touching every page: what any loader pays for fresh destination memory.
double fresh_memory_read_seconds(const std::vector<std::string>& files) {
  const int64_t t0 = monotonic_ns();
  for (const auto& f : files) {
    const auto size = static_cast<size_t>(fs::file_size(f));
    Tensor dst = Tensor::host_uninitialized(DType::kF32, {static_cast<int64_t>(size / 2)});
    const int fd = open(f.c_str(), O_RDONLY);
    auto* p = static_cast<char*>(dst.data());
    size_t done = 0;
    ssize_t n;
    while (done < size && (n = read(fd, p + done, std::min<size_t>(16 << 20, size - done))) > 0) done += n;
    close(fd);
    for (size_t i = size; i < 2 * size; i += 4096) p[i] = 0;  // touch the other half
  }
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-model";
  int tokens = 256, threads = 2, repeats = 3;
  DType dtype = DType::kBF16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--tokens") tokens = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--dtype") dtype = std::string(argv[i + 1]) == "float32" ? DType::kF32 : DType::kBF16;
  }
  if (!fs::exists(fs::path(dir) / "config.json")) {
    tools::MakeModelOptions o;
    o.family = "llama";
    o.out_dir = dir;
    o.shape = {.n_vocab = 8192, .n_embd = 1024, .n_layer = 8, .n_head = 16, .n_head_kv = 8, .head_dim = 0, .n_ff = 2816};
    o.dtype = dtype;
    o.shards = 2;
    if (auto s = tools::make_model(o); !s.ok()) {
      std::fprintf(stderr, "make-model: %s\n", s.message().c_str());
      return 3;
    }
  }
  auto info = model::open_model_folder(dir, model::WeightsNeeded::kRequired);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", info.status().message().c_str());
    return 2;
  }
  backend::BackendOptions bo;
  bo.threads = threads;
  auto be = backend::make_backend(bo);
  std::printf("model: %s, n_embd %lld, %lld layers, n_ff %lld, %zu files, %.1f MiB on disk\n", dir.c_str(),
              static_cast<long long>(info->hp.n_embd), static_cast<long long>(info->hp.n_layer),
              static_cast<long long>(info->hp.n_ff), info->catalog.files().size(),
              static_cast<double>(info->catalog.total_bytes()) / (1 << 20));
  std::printf("backend: %s\n\n", (*be)->describe().c_str());

  // 1. Load vs raw read, page cache warmed by a first read; best of `repeats`.
  uint64_t raw_bytes = 0;
  sequential_read_seconds(info->catalog.files(), &raw_bytes);
  double raw_s = 1e30, load_s = 1e30, fresh_s = 1e30, first_load_s = 0;
  uint64_t load_bytes = 0;
  for (int r = 0; r < repeats; ++r) {
    raw_s = std::min(raw_s, sequential_read_seconds(info->catalog.files(), &raw_bytes));
    fresh_s = std::min(fresh_s, fresh_memory_read_seconds(info->catalog.files()));
    model::Weights w;
    std::vector<checkpoint::WeightRecord> recs;
    auto st = runtime::load_weights(*info, **be, w, recs);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.status().message().c_str());
      return 3;
    }
    if (r == 0) first_load_s = st->seconds;  // the process's first load: fresh memory, as in a run
    load_s = std::min(load_s, st->seconds);
    load_bytes = st->bytes_read;
  }
  const double raw_gbs = static_cast<double>(raw_bytes) / raw_s * 1e-9;
  const double load_gbs = static_cast<double>(load_bytes) / load_s * 1e-9;
  std::printf("load      %.3f GB/s (%.1f MiB in %.3f s, %s -> f32)\n", load_gbs,
              static_cast<double>(load_bytes) / (1 << 20), load_s,
              dtype_name(info->catalog.find(info->specs[0].name)->dtype));
  std::printf("raw read  %.3f GB/s (%.1f MiB in %.3f s, sequential read(2), warm cache)\n", raw_gbs,
              static_cast<double>(raw_bytes) / (1 << 20), raw_s);
  const double fresh_gbs = static_cast<double>(raw_bytes) / fresh_s * 1e-9;
  std::printf("ratio     %.2f  (target >= 0.80); first load of the process %.3f GB/s, ratio %.2f\n",
              load_gbs / raw_gbs, static_cast<double>(load_bytes) / first_load_s * 1e-9,
              static_cast<double>(load_bytes) / first_load_s * 1e-9 / raw_gbs);
  std::printf("raw read into fresh f32-sized memory %.3f GB/s; load / that = %.2f\n\n", fresh_gbs, load_gbs / fresh_gbs);

  // 2. Prefill of `tokens` tokens vs the same GEMMs alone.
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  (void)runtime::load_weights(*info, **be, w, recs);
  const auto& hp = info->hp;
  runtime::Forward fwd(**be, *info->adapter, hp, w);
  std::vector<int32_t> ids(tokens);
  for (int i = 0; i < tokens; ++i) ids[i] = (i * 7919) % static_cast<int32_t>(hp.n_vocab);
  // Matmul FLOPs of one prefill (lm_head on the last row only, as the runner does) + attention.
  struct Shape3 {
    int64_t m, n, k;
  };
  std::vector<Shape3> gemms;
  const int64_t q = hp.n_head * hp.head_dim, kv = hp.n_head_kv * hp.head_dim;
  for (int l = 0; l < hp.n_layer; ++l) {
    for (auto s : {Shape3{tokens, q, hp.n_embd}, Shape3{tokens, kv, hp.n_embd}, Shape3{tokens, kv, hp.n_embd},
                   Shape3{tokens, hp.n_embd, q}, Shape3{tokens, hp.n_ff, hp.n_embd}, Shape3{tokens, hp.n_ff, hp.n_embd},
                   Shape3{tokens, hp.n_embd, hp.n_ff}})
      gemms.push_back(s);
  }
  gemms.push_back({1, hp.n_vocab, hp.n_embd});
  double flops = 0;
  for (const auto& g : gemms) flops += 2.0 * g.m * g.n * g.k;
  const double attn_flops = 2.0 * 2.0 * hp.n_layer * hp.n_head * hp.head_dim * tokens * (tokens + 1) / 2.0;

  double prefill_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    runtime::KvCache cache = fwd.new_cache(tokens);
    const int64_t t0 = monotonic_ns();
    fwd.run(ids, 0, cache, nullptr, false);
    prefill_s = std::min(prefill_s, seconds_since(t0));
  }
  // The same GEMMs through the selected GEMM path, operands preallocated.
  int64_t max_x = 0, max_y = 0;
  for (const auto& g : gemms) {
    max_x = std::max(max_x, g.m * g.k);
    max_y = std::max(max_y, g.m * g.n);
  }
  std::vector<float> x(max_x, 0.01f), y(max_y);
  std::vector<std::vector<float>> ws;
  for (const auto& g : gemms) ws.emplace_back(g.n * g.k, 0.001f);
  double gemm_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const int64_t t0 = monotonic_ns();
    for (size_t i = 0; i < gemms.size(); ++i)
      kernels::cpu::matmul_nt(gemms[i].m, gemms[i].n, gemms[i].k, x.data(), ws[i].data(), y.data());
    gemm_s = std::min(gemm_s, seconds_since(t0));
  }
  const double prefill_gf = (flops + attn_flops) / prefill_s * 1e-9;
  const double gemm_gf = flops / gemm_s * 1e-9;
  std::printf("prefill   %.1f GFLOP/s (%d tokens in %.3f s, %.1f tok/s; %.2f GFLOP incl. attention)\n", prefill_gf,
              tokens, prefill_s, tokens / prefill_s, (flops + attn_flops) * 1e-9);
  std::printf("gemm only %.1f GFLOP/s (same %zu shapes, %s, %d threads)\n", gemm_gf, gemms.size(),
              kernels::cpu::gemm_info().path.c_str(), kernels::cpu::gemm_info().threads);
  std::printf("ratio     %.2f  (target >= 0.50)\n", prefill_gf / gemm_gf);
  return 0;
}
