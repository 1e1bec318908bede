// Model-level benchmark (not a test): prefill GFLOP/s of a model with hidden size >= 1024 vs
// the GEMM path alone at the same shapes, measured in one run on this machine (target ratio
// >= 0.9; the prefill side counts the causal half of QK^T and PV too, the GEMM side does not). Checkpoint loading has its own benchmark, load_bench.
// Usage: model_bench [--dir DIR] [--tokens N] [--threads T] [--dtype bfloat16|float32]
//                    [--repeats R] [--only prefill|gemm] (one half alone, for a profiler)
//                    [--weights f32|as_stored] (the model's bf16 weights widened on load, or kept
//                    as stored and widened inside the GEMM; the GEMM-only side is f32 either way).
// The model is generated once per folder. The prefill GEMM path is timed on the model's shapes
// first, as a run does (DAYZERO_GEMM_TUNE=off: the fixed rule).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench_model.h"
#include "core/clock.h"
#include "kernels/ops.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

double seconds_since(int64_t t0) { return static_cast<double>(monotonic_ns() - t0) * 1e-9; }

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-model";
  int tokens = 256, threads = 2, repeats = 3;
  DType dtype = DType::kBF16;
  std::string only, weights = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--tokens") tokens = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--dtype") dtype = std::string(argv[i + 1]) == "float32" ? DType::kF32 : DType::kBF16;
    else if (a == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--weights") weights = argv[i + 1];
  }
  if (weights != "f32" && weights != "as_stored") {
    std::fprintf(stderr, "model_bench: --weights takes f32 or as_stored, not '%s'\n", weights.c_str());
    return 2;
  }
  const bool stored = weights == "as_stored";
  if (!only.empty() && only != "prefill" && only != "gemm") {
    std::fprintf(stderr, "model_bench: --only takes prefill or gemm, not '%s'\n", only.c_str());
    return 2;
  }
  int code = 0;
  const model::ModelShape shape{.n_vocab = 8192, .n_embd = 1024, .n_layer = 8, .n_head = 16,
                                .n_head_kv = 8, .head_dim = 0, .n_ff = 2816};
  auto bm = bench::open_bench_model(dir, shape, dtype, 2, threads, &code, stored);
  if (!bm) return code;
  const model::ModelFolder* info = &bm->info;
  backend::Backend& be = *bm->be;
  std::printf("model: %s, n_embd %lld, %lld layers, n_ff %lld, %zu files, %.1f MiB on disk\n", dir.c_str(),
              static_cast<long long>(info->hp.n_embd), static_cast<long long>(info->hp.n_layer),
              static_cast<long long>(info->hp.n_ff), info->catalog.files().size(),
              static_cast<double>(info->catalog.total_bytes()) / (1 << 20));
  std::printf("backend: %s; weights %s\n\n", be.describe().c_str(), weights.c_str());

  // Prefill of `tokens` tokens vs the same GEMMs alone.
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  const auto policy = stored ? plan::WeightsOnDevice::kAsStored : plan::WeightsOnDevice::kF32;
  if (auto st = runtime::load_weights(*info, be, w, recs, {}, {}, checkpoint::kDefaultStagingBytes, 0, policy);
      !st.ok()) {
    std::fprintf(stderr, "%s\n", st.status().message().c_str());
    return 3;
  }
  const auto& hp = info->hp;
  // The prefill GEMM path timed on these weights' shapes, as a run does after loading (no cache):
  // the prefill and the GEMM-only side both take it. DAYZERO_GEMM_TUNE=off keeps the fixed rule.
  const char* tune_env = std::getenv("DAYZERO_GEMM_TUNE");
  if (!tune_env || std::string(tune_env) != "off") {
    std::string chosen;
    std::printf("%s\n\n", be.tune_prefill(w.tensors(), "", &chosen).c_str());
  } else {
    std::printf("prefill GEMM path: the fixed rule (DAYZERO_GEMM_TUNE=off)\n\n");
  }
  runtime::Forward fwd(be, *info->adapter, hp, w);
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

  // The same GEMMs through the selected GEMM path, operands preallocated; the weights in one
  // arena, as the CPU backend holds the model's (HostArena).
  int64_t max_x = 0, max_y = 0;
  size_t arena_bytes = 0;
  for (const auto& g : gemms) {
    max_x = std::max(max_x, g.m * g.k);
    max_y = std::max(max_y, g.m * g.n);
    arena_bytes += HostArena::padded(static_cast<size_t>(g.n * g.k) * 4);
  }
  std::vector<float> x, y;
  std::optional<HostArena> arena;
  std::vector<Tensor> ws;
  if (only != "prefill") {
    x.assign(max_x, 0.01f);
    y.resize(max_y);
    arena.emplace(arena_bytes);
    for (const auto& g : gemms) {
      ws.push_back(arena->take(DType::kF32, {g.n, g.k}));
      std::fill_n(ws.back().f32(), g.n * g.k, 0.001f);
    }
  }
  // Prefill and GEMMs alone alternate, best of each: a slow spell of a shared machine then
  // falls on both rather than on one.
  double prefill_s = 1e30, gemm_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    if (only != "gemm") {
      runtime::KvCache cache = fwd.new_cache(tokens);
      const int64_t t0 = monotonic_ns();
      fwd.run(ids, 0, cache, nullptr, false);
      prefill_s = std::min(prefill_s, seconds_since(t0));
    }
    if (only != "prefill") {
      const int64_t t0 = monotonic_ns();
      for (size_t i = 0; i < gemms.size(); ++i)
        kernels::cpu::matmul_nt(gemms[i].m, gemms[i].n, gemms[i].k, x.data(), ws[i].f32(), y.data());
      gemm_s = std::min(gemm_s, seconds_since(t0));
    }
  }
  const double prefill_gf = (flops + attn_flops) / prefill_s * 1e-9;
  const double gemm_gf = flops / gemm_s * 1e-9;
  if (only != "gemm") {
    std::printf("prefill   %.1f GFLOP/s (%d tokens in %.3f s, %.1f tok/s; %.2f GFLOP: GEMMs %.2f + attention %.2f)\n",
                prefill_gf, tokens, prefill_s, tokens / prefill_s, (flops + attn_flops) * 1e-9, flops * 1e-9,
                attn_flops * 1e-9);
  }
  if (only != "prefill") {
    std::printf("gemm only %.1f GFLOP/s (same %zu shapes, %s, %d threads)\n", gemm_gf, gemms.size(),
                kernels::cpu::gemm_info().path.c_str(), kernels::cpu::gemm_info().threads);
  }
  if (only.empty()) std::printf("ratio     %.2f  (target >= 0.90)\n", prefill_gf / gemm_gf);
  return 0;
}
