// Decode benchmark (not a test): greedy decode tokens/s of one model with 1 sequence and with
// B sequences decoded together (one forward per step over the batch), measured in one run on
// this machine, and their ratio; for the weights widened to f32 and kept in bf16 as stored
// (model.weights_on_device: float32 vs as_stored), each against a plain read of its own bytes.
// No MPI: one rank, the whole model.
// Usage: decode_bench [--dir DIR] [--batch B] [--steps N] [--prompt P] [--threads T] [--repeats R]
//                     [--weights f32|bf16|both] [--pool-spin-us US]  (how long idle pool workers spin)
// The model (a ~100M-parameter llama stored in bf16) is generated once per folder.
// DAYZERO_GEMM_TUNE=off: the small-M kernel keeps its defaults instead of the start-up tuning.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench_model.h"
#include "plain_read.h"
#include "core/clock.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tune.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"
#include "runtime/forward.h"
#include "runtime/generate.h"
#include "runtime/model_loader.h"

namespace fs = std::filesystem;
using namespace dayzero;

namespace {

struct Figure {
  double tokens_per_s = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the process's CPU time (all threads, spinning included) over the same span
  std::vector<int32_t> first_ids;  // generated ids of sequence 0, for the cross-check
};

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Prefills `batch` prompts of `prompt` tokens each (different tokens per sequence), then times
// one decode_batch of `steps` tokens per sequence (no EOS stops).
Figure decode_once(runtime::Forward& fwd, const model::HParams& hp, int batch, int prompt, int steps) {
  runtime::GenerateOptions go;
  go.max_new_tokens = steps;
  go.stop_at_eos = false;
  go.top_k = 0;
  std::vector<runtime::Sequence> seqs;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int i = 0; i < prompt; ++i) ids[i] = static_cast<int32_t>((1 + b * 131 + i * 7919) % hp.n_vocab);
    seqs.push_back(runtime::prefill(fwd, hp, ids, go, nullptr));
  }
  const int64_t t0 = monotonic_ns();
  const double c0 = process_cpu_s();
  std::vector<runtime::Generation> gens = runtime::decode_batch(fwd, hp, std::move(seqs), go, {});
  Figure f;
  f.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  f.cpu_seconds = process_cpu_s() - c0;
  for (const auto& g : gens) f.tokens += g.decode_tokens;
  f.tokens_per_s = static_cast<double>(f.tokens) / f.seconds;
  f.first_ids = gens.front().generated_ids;
  return f;
}

double load_average() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

// GB/s of the built-in small-M kernel at m = 1 over `gemvs` in turn (the decode step's GEMMs
// alone, no other kernel between them): what separates the plain read from the decode is the
// kernel's own streaming below this and the rest of the step above it. Each weight is its own
// call, where decode fuses q/k/v and gate/up: a weight under 128 K multiply-adds (k and v of the
// 109 M llama) runs on one thread here, which puts this a few percent under decode's GEMMs.
double gemv_sweep_gb_s(const std::vector<kernels::cpu::gemm::TuneWeight>& gemvs) {
  int64_t k_max = 1, n_max = 1, bytes = 0;
  for (const auto& g : gemvs) k_max = std::max(k_max, g.k), n_max = std::max(n_max, g.n);
  std::vector<float> x(static_cast<size_t>(k_max), 0.01f), y(static_cast<size_t>(n_max));
  const int64_t t0 = monotonic_ns();
  for (const auto& g : gemvs) {
    namespace gemm = kernels::cpu::gemm;
    if (g.bf16) gemm::matmul_nt_small_bf16(1, g.n, g.k, x.data(), static_cast<const uint16_t*>(g.w), y.data(), 0.0f);
    else gemm::builtin()->matmul_nt(1, g.n, g.k, x.data(), static_cast<const float*>(g.w), y.data(), 0.0f);
    bytes += g.n * g.k * (g.bf16 ? 2 : 4);
  }
  return static_cast<double>(bytes) / (static_cast<double>(monotonic_ns() - t0) * 1e-9) * 1e-9;
}

Figure median(std::vector<Figure> v) {
  std::sort(v.begin(), v.end(), [](const Figure& a, const Figure& b) { return a.tokens_per_s < b.tokens_per_s; });
  return v[v.size() / 2];
}

struct Measured {
  Figure one, many;
  double decode_gb_s = 0, mb_per_token = 0;
  double read_gb_s = 0;       // median of the reads taken between the decode runs
  double read_best_gb_s = 0;  // the fastest of them
  double gemv_gb_s = 0;       // median of the GEMM-only sweeps taken with the reads
  int reads = 0;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Loads the model's weights in `kept` (F32: widened on load; BF16: as stored) and measures.
std::optional<Measured> measure(const model::ModelFolder& info, DType kept, int threads, int batch, int prompt,
                                int steps, int repeats) {
  backend::BackendOptions bo;
  bo.threads = threads;
  bo.cpu_keeps_stored = kept == DType::kBF16;
  auto made = backend::make_backend(bo);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().message().c_str());
    return std::nullopt;
  }
  backend::Backend& be = **made;
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  const auto policy = kept == DType::kBF16 ? plan::WeightsOnDevice::kAsStored : plan::WeightsOnDevice::kF32;
  if (auto st = runtime::load_weights(info, be, w, recs, {}, {}, checkpoint::kDefaultStagingBytes, 0, policy); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.status().message().c_str());
    return std::nullopt;
  }
  const auto& hp = info.hp;
  // The decode GEMM's settings measured on these weights, as a run does after loading (no cache);
  // DAYZERO_GEMM_TUNE=off keeps the defaults, as it does for a run.
  const char* tune_env = std::getenv("DAYZERO_GEMM_TUNE");
  const bool tune = !tune_env || std::string(tune_env) != "off";
  std::printf("%s: %s\n", kept == DType::kBF16 ? "bf16" : "f32",
              tune ? be.tune(w.tensors(), "").c_str() : "small-M kernel defaults (DAYZERO_GEMM_TUNE=off)");
  runtime::Forward fwd(be, *info.adapter, hp, w);
  // Batch 1 reads every weight once per token but the embedding table (one row each; all of
  // it when it is also the lm_head): its bytes per token against a plain read of them.
  std::vector<std::pair<const float*, int64_t>> spans;
  std::vector<kernels::cpu::gemm::TuneWeight> gemvs;  // w[n, k] as held, f32 or bf16
  int64_t bytes = 0;
  for (const auto& r : recs) {
    if (r.name == "model.embed_tokens.weight" && !hp.tie_embeddings) continue;
    const Tensor& t = w.get(r.name);
    spans.push_back({static_cast<const float*>(t.data()), static_cast<int64_t>(t.bytes() / 4)});
    bytes += static_cast<int64_t>(t.bytes());
    if (t.shape().size() == 2) gemvs.push_back({t.shape()[0], t.shape()[1], t.data(), t.dtype() == DType::kBF16});
  }
  (void)decode_once(fwd, hp, 1, prompt, 3);  // warm-up: first-touch of buffers and GEMM paths
  // The plain read is taken between the decode runs and summarised as they are (a median): on
  // a shared machine the memory bandwidth drifts by a fifth within a minute, and a best-of
  // read set against a median decode would charge the decode with that drift.
  std::vector<Figure> ones, batched;
  std::vector<double> reads, sweeps;
  for (int r = 0; r < repeats; ++r) {
    reads.push_back(bench::plain_read_gb_s(spans, 3));
    sweeps.push_back(gemv_sweep_gb_s(gemvs));
    ones.push_back(decode_once(fwd, hp, 1, prompt, steps));
    batched.push_back(decode_once(fwd, hp, batch, prompt, steps));
  }
  reads.push_back(bench::plain_read_gb_s(spans, 3));
  Measured m{median(ones), median(batched)};
  m.mb_per_token = static_cast<double>(bytes) * 1e-6;
  m.decode_gb_s = static_cast<double>(bytes) * m.one.tokens_per_s * 1e-9;
  m.read_gb_s = median_of(reads);
  m.read_best_gb_s = *std::max_element(reads.begin(), reads.end());
  m.gemv_gb_s = median_of(sweeps);
  m.reads = static_cast<int>(reads.size());
  return m;
}

void print(const char* what, const Measured& m, int batch) {
  // Tokens per CPU-second ranks builds on a loaded machine, where wall time is the scheduler's.
  std::printf("%s weights\n", what);
  std::printf("  batch 1   %8.1f tok/s (%lld tokens in %.3f s; %.1f tok per CPU-second)\n", m.one.tokens_per_s,
              static_cast<long long>(m.one.tokens), m.one.seconds,
              static_cast<double>(m.one.tokens) / m.one.cpu_seconds);
  std::printf("  batch %-3d %8.1f tok/s (%lld tokens in %.3f s; %.1f tok per CPU-second)\n", batch,
              m.many.tokens_per_s, static_cast<long long>(m.many.tokens), m.many.seconds,
              static_cast<double>(m.many.tokens) / m.many.cpu_seconds);
  std::printf("  ratio     %.2f  (batch %d / batch 1)\n", m.many.tokens_per_s / m.one.tokens_per_s, batch);
  std::printf("  weights   %.1f MB per token at batch 1: %.1f GB/s; a plain read of the same bytes %.1f GB/s "
              "(ratio %.2f; median of %d reads between the runs, the fastest %.1f GB/s: ratio %.2f)\n",
              m.mb_per_token, m.decode_gb_s, m.read_gb_s, m.decode_gb_s / m.read_gb_s, m.reads, m.read_best_gb_s,
              m.decode_gb_s / m.read_best_gb_s);
  std::printf("  gemms     the step's GEMMs alone at m = 1 over the same weights %.1f GB/s (ratio to the read %.2f; "
              "median of %d)\n",
              m.gemv_gb_s, m.gemv_gb_s / m.read_gb_s, m.reads - 1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/bench-decode-bf16", weights = "both";
  int batch = 8, steps = 33, prompt = 16, threads = 2, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--prompt") prompt = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--weights") weights = argv[i + 1];
    else if (a == "--pool-spin-us") kernels::cpu::set_pool_spin_us(std::atoi(argv[i + 1]));
  }
  if (weights != "f32" && weights != "bf16" && weights != "both") {
    std::fprintf(stderr, "decode_bench: --weights %s is not f32, bf16 or both\n", weights.c_str());
    return 2;
  }
  int code = 0;
  const model::ModelShape shape{.n_vocab = 8192, .n_embd = 768, .n_layer = 12, .n_head = 12, .n_head_kv = 4,
                                    .head_dim = 0, .n_ff = 2560};
  auto bm = bench::open_bench_model(dir, shape, DType::kBF16, 1, threads, &code);
  if (!bm) return code;
  const model::ModelFolder& info = bm->info;
  const auto& hp = info.hp;
  int64_t params = 0;
  for (const auto& s : info.specs) params += shape_numel(s.shape);
  std::printf("model: %s, llama, %.1fM parameters (stored bf16), n_embd %lld, %lld layers, n_ff %lld, n_vocab %lld\n",
              dir.c_str(), static_cast<double>(params) * 1e-6, static_cast<long long>(hp.n_embd),
              static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_ff), static_cast<long long>(hp.n_vocab));
  std::printf("backend: %s (%s)\n", bm->be->describe().c_str(), kernels::cpu::gemm_info().path.c_str());
  std::printf("decode: prompts of %d tokens, %d generated tokens each (%d forward steps), median of %d interleaved "
              "runs; load average %.2f at start\n\n",
              prompt, steps, steps - 1, repeats, load_average());
  std::optional<Measured> f32, bf16;
  if (weights != "bf16") {
    f32 = measure(info, DType::kF32, threads, batch, prompt, steps, repeats);
    if (!f32) return 3;
    print("f32 (widened on load)", *f32, batch);
  }
  if (weights != "f32") {
    bf16 = measure(info, DType::kBF16, threads, batch, prompt, steps, repeats);
    if (!bf16) return 3;
    print("bf16 (as stored, widened in the GEMM)", *bf16, batch);
  }
  bool same = true;
  for (const auto* m : {&f32, &bf16})
    if (*m) same &= (*m)->one.first_ids == (*m)->many.first_ids;
  std::printf("sequence 0 generated ids %s in batch 1 and batch %d\n", same ? "identical" : "DIFFER", batch);
  if (f32 && bf16) {
    const bool agree = f32->one.first_ids == bf16->one.first_ids;
    std::printf("bf16 / f32 weights: batch 1 %.2fx, batch %d %.2fx tok/s; generated ids %s\n",
                bf16->one.tokens_per_s / f32->one.tokens_per_s, batch, bf16->many.tokens_per_s / f32->many.tokens_per_s,
                agree ? "identical" : "DIFFER");
    same &= agree;
  }
  std::printf("load average %.2f at end\n", load_average());
  return same ? 0 : 1;
}
