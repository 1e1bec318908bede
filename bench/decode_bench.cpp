// Decode benchmark (not a test): greedy decode tokens/s of one model with 1 sequence and with
// B sequences decoded together (one forward per step over the batch), measured in one run on
// this machine, and their ratio, each against a plain read of the bytes a batch-1 step reads.
// No MPI: one rank, the whole model.
// --model dense (default): a ~100M-parameter llama stored in bf16, its weights widened to f32
//   and kept in bf16 as stored (model.weights_on_device: float32 vs as_stored).
// --model moe: a qwen3_moe whose routed experts are stored in MXFP4 (make-model --dtype mxfp4)
//   and hold most of its bytes, in DIR/mxfp4, and its bf16 twin in DIR/bf16 (the same weights,
//   the experts dequantised: an E2M1 value times a power of two is exact in bf16), both loaded
//   as stored (model.weights_on_device: as_stored). A batch-1 step reads every weight but the
//   embedding table and, per layer, only its top-k routed experts: the bytes per token and the
//   plain read count those; both are loaded and their rounds take turns; the ratios MXFP4 / bf16
//   of tokens/s and of bytes are printed, and the two must generate the same ids.
// Usage: decode_bench [--model dense|moe] [--dir DIR] [--batch B] [--steps N] [--prompt P]
//                     [--threads T] [--repeats R] [--weights f32|bf16|both (dense) | bf16|mxfp4|both (moe)]
//                     [--pool-spin-us US]  (how long idle pool workers spin)
// The models are generated once per folder (default build/bench-decode-bf16, build/bench-decode-moe).
// DAYZERO_GEMM_TUNE=off: the small-M kernel keeps its defaults instead of the start-up tuning.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_model.h"
#include "checkpoint/writer.h"
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

// GB/s of the backend's matmul at m = 1 over `ws` in turn (any dtype it keeps: bf16, FP4 as
// stored), `bytes` being what they hold: the MoE model's step GEMMs alone.
double matmul_sweep_gb_s(backend::Backend& be, const std::vector<const Tensor*>& ws, int64_t bytes) {
  std::unordered_map<int64_t, Tensor> xs, ys;  // by k and by n
  for (const Tensor* w : ws) {
    if (!xs.count(w->dim(1))) {
      Tensor x = Tensor::host(DType::kF32, {1, w->dim(1)});
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.01f;
      xs.emplace(w->dim(1), be.to_device(x));
    }
    if (!ys.count(w->dim(0))) ys.emplace(w->dim(0), be.empty(DType::kF32, {1, w->dim(0)}));
  }
  const int64_t t0 = monotonic_ns();
  for (const Tensor* w : ws) be.matmul(xs.at(w->dim(1)), *w, ys.at(w->dim(0)));
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
  int64_t held_bytes = 0;         // every weight as held (tensors' bytes and the scales held beside them)
  int64_t expert_held_bytes = 0;  // the routed experts' share of it (MoE)
  int64_t expert_token_bytes = 0;  // the routed experts' bytes a batch-1 step reads (MoE)
};

// How a variant keeps its weights: the load policy and whether the backend keeps them as stored.
struct Variant {
  std::string name;  // f32, bf16, mxfp4
  plan::WeightsOnDevice policy;
  bool keeps_stored;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The routed expert index in a name ("...experts.{E}..."), -1 when there is none.
int expert_of(const std::string& name) {
  const size_t at = name.find(".experts.");
  return at == std::string::npos ? -1 : std::atoi(name.c_str() + at + 9);
}

// One variant loaded: its backend, weights and forward pass, the small-M settings its tuning
// chose (set again before each of its rounds, so variants can take turns), the spans a batch-1
// step reads and the figures of its rounds so far.
struct Loaded {
  std::unique_ptr<backend::Backend> be;
  model::Weights w;
  std::unique_ptr<runtime::Forward> fwd;
  kernels::cpu::gemm::SmallMSettings settings;
  std::vector<std::pair<const float*, int64_t>> spans;
  std::vector<kernels::cpu::gemm::TuneWeight> gemvs;  // w[n, k] as held, f32 or bf16 (dense)
  std::vector<const Tensor*> step_weights;            // the 2-D weights a batch-1 step multiplies (moe)
  int64_t bytes = 0, sweep_bytes = 0, scale_bytes = 0, expert_held = 0, expert_token = 0;
  bool moe = false;
  std::vector<Figure> ones, batched;
  std::vector<double> reads, sweeps;
};

// Loads the model's weights as `v` says, tunes, and counts what a batch-1 step reads. moe: the
// routed experts' bytes in the share n_expert_used / n_expert (every expert of a layer has the
// same shape); the plain read and the GEMM sweep take experts 0 .. k-1 of each layer (and the
// scales' share as bytes of the next experts' codes).
std::unique_ptr<Loaded> load_variant(const model::ModelFolder& info, const Variant& v, bool moe, int threads,
                                     int prompt) {
  auto L = std::make_unique<Loaded>();
  L->moe = moe;
  backend::BackendOptions bo;
  bo.threads = threads;
  bo.cpu_keeps_stored = v.keeps_stored;
  auto made = backend::make_backend(bo);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().message().c_str());
    return nullptr;
  }
  L->be = std::move(made).value();
  backend::Backend& be = *L->be;
  model::Weights& w = L->w;
  std::vector<checkpoint::WeightRecord> recs;
  if (auto st = runtime::load_weights(info, be, w, recs, {}, {}, checkpoint::kDefaultStagingBytes, 0, v.policy);
      !st.ok()) {
    std::fprintf(stderr, "%s\n", st.status().message().c_str());
    return nullptr;
  }
  const auto& hp = info.hp;
  // The decode GEMM's settings measured on these weights, as a run does after loading (no cache);
  // DAYZERO_GEMM_TUNE=off keeps the defaults, as it does for a run.
  const char* tune_env = std::getenv("DAYZERO_GEMM_TUNE");
  const bool tune = !tune_env || std::string(tune_env) != "off";
  std::printf("%s: %s\n", v.name.c_str(),
              tune ? be.tune(w.tensors(), "").c_str() : "small-M kernel defaults (DAYZERO_GEMM_TUNE=off)");
  L->settings = kernels::cpu::gemm::small_m_settings();
  L->fwd = std::make_unique<runtime::Forward>(be, *info.adapter, hp, w);
  // Batch 1 reads every weight once per token but the embedding table (one row each; all of
  // it when it is also the lm_head): its bytes per token against a plain read of them.
  auto& spans = L->spans;
  L->scale_bytes = be.memory_info().weight_scale_bytes;  // FP4 experts' scales, held beside their codes
  if (!moe) {
    for (const auto& r : recs) {
      if (r.name == "model.embed_tokens.weight" && !hp.tie_embeddings) continue;
      const Tensor& t = w.get(r.name);
      spans.push_back({static_cast<const float*>(t.data()), static_cast<int64_t>(t.bytes() / 4)});
      L->bytes += static_cast<int64_t>(t.bytes());
      if (t.shape().size() == 2)
        L->gemvs.push_back({t.shape()[0], t.shape()[1], t.data(), t.dtype() == DType::kBF16});
    }
  } else {
    int64_t read = 0;  // bytes the spans cover
    // A span starting at a 64-byte boundary inside [p, p + n) (FP4 codes follow their scale bytes).
    const auto add_span = [&](const void* p, int64_t n) {
      const auto a = reinterpret_cast<uintptr_t>(p), al = (a + 63) & ~uintptr_t{63};
      const int64_t floats = (n - static_cast<int64_t>(al - a)) / 4;
      if (floats <= 0) return;
      spans.push_back({reinterpret_cast<const float*>(al), floats});
      read += floats * 4;
    };
    std::vector<const Tensor*> spare;  // experts k.. of each layer: bytes for the scales' share
    for (const auto& spec : info.specs) {
      const Tensor* held = spec.skip_load ? nullptr : w.find(spec.name);  // an FP4 weight's companions: none
      if (!held) continue;
      const Tensor& t = *held;
      const auto tb = static_cast<int64_t>(t.bytes());
      if (spec.component == model::Component::kRoutedExpert) {
        L->expert_held += tb;
        if (expert_of(spec.name) < hp.n_expert_used) {
          add_span(t.data(), tb);
          L->step_weights.push_back(&t);
        } else {
          spare.push_back(&t);
        }
        continue;
      }
      if (spec.name == info.adapter->embed_name() && !hp.tie_embeddings) continue;  // one row a token
      L->bytes += tb;
      add_span(t.data(), tb);
      if (t.rank() == 2) L->step_weights.push_back(&t), L->sweep_bytes += tb;
    }
    L->expert_held += L->scale_bytes;
    L->expert_token = L->expert_held * hp.n_expert_used / hp.n_expert;
    L->bytes += L->expert_token;
    L->sweep_bytes += L->expert_token;
    for (size_t i = 0; i < spare.size() && read < L->bytes; ++i)
      add_span(spare[i]->data(), std::min<int64_t>(static_cast<int64_t>(spare[i]->bytes()), L->bytes - read + 64));
  }
  (void)decode_once(*L->fwd, hp, 1, prompt, 3);  // warm-up: first-touch of buffers and GEMM paths
  return L;
}

// One round: a plain read, the GEMM sweep, a batch-1 and a batch-B decode. The plain read is
// taken between the decode runs and summarised as they are (a median): on a shared machine the
// memory bandwidth drifts by a fifth within a minute, and a best-of read set against a median
// decode would charge the decode with that drift.
void round_of(Loaded& L, const model::HParams& hp, int batch, int prompt, int steps) {
  kernels::cpu::gemm::set_small_m_settings(L.settings);
  L.reads.push_back(bench::plain_read_gb_s(L.spans, 3));
  L.sweeps.push_back(L.moe ? matmul_sweep_gb_s(*L.be, L.step_weights, L.sweep_bytes) : gemv_sweep_gb_s(L.gemvs));
  L.ones.push_back(decode_once(*L.fwd, hp, 1, prompt, steps));
  L.batched.push_back(decode_once(*L.fwd, hp, batch, prompt, steps));
}

// The medians of the rounds, after one more read.
Measured finish(Loaded& L) {
  kernels::cpu::gemm::set_small_m_settings(L.settings);
  L.reads.push_back(bench::plain_read_gb_s(L.spans, 3));
  Measured m{median(L.ones), median(L.batched)};
  m.mb_per_token = static_cast<double>(L.bytes) * 1e-6;
  m.decode_gb_s = static_cast<double>(L.bytes) * m.one.tokens_per_s * 1e-9;
  m.read_gb_s = median_of(L.reads);
  m.read_best_gb_s = *std::max_element(L.reads.begin(), L.reads.end());
  m.gemv_gb_s = median_of(L.sweeps);
  m.reads = static_cast<int>(L.reads.size());
  m.held_bytes = L.w.bytes() + L.scale_bytes;
  m.expert_held_bytes = L.expert_held;
  m.expert_token_bytes = L.expert_token;
  return m;
}

// Loads one variant and measures it alone (`repeats` rounds).
std::optional<Measured> measure(const model::ModelFolder& info, const Variant& v, int threads, int batch, int prompt,
                                int steps, int repeats) {
  auto L = load_variant(info, v, false, threads, prompt);
  if (!L) return std::nullopt;
  for (int r = 0; r < repeats; ++r) round_of(*L, info.hp, batch, prompt, steps);
  return finish(*L);
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
  if (m.expert_held_bytes > 0)
    std::printf("  held      %.1f MB of weights, the routed experts %.1f MB of them; a batch-1 step reads %.1f MB of "
                "expert weights (top-k of each layer) and %.1f MB of the rest\n",
                static_cast<double>(m.held_bytes) * 1e-6, static_cast<double>(m.expert_held_bytes) * 1e-6,
                static_cast<double>(m.expert_token_bytes) * 1e-6,
                m.mb_per_token - static_cast<double>(m.expert_token_bytes) * 1e-6);
}

// --model moe: a qwen3_moe with MXFP4 routed experts (make-model --dtype mxfp4) of ~630 MB in
// bf16, 96 % of it routed experts (88 % of a batch-1 token's reads): 6 layers of 32 experts (8
// used a token) of 1024 x 512, a small attention (8 query heads, 2 KV heads of 64), vocabulary
// 2048. A folder made otherwise (another family, no FP4 experts) is refused.
const model::ModelShape kMoeShape{.n_vocab = 2048, .n_embd = 1024, .n_layer = 6, .n_head = 8, .n_head_kv = 2,
                                  .head_dim = 64, .n_ff = 1024, .n_expert = 32, .n_expert_used = 8,
                                  .n_ff_expert = 512};

// Writes the bf16 twin of the MXFP4 model `mx` into dir: its config.json without the
// quantization_config, its tokenizer and generation files, and every weight in bf16 as the CPU
// holds it under weights_on_device: bfloat16 (the experts dequantised: an E2M1 value times a
// power of two is exact in bf16; the rest is bf16 as stored), in one model.safetensors.
Status write_bf16_twin(const model::ModelFolder& mx, const std::string& dir) {
  backend::BackendOptions bo;
  bo.cpu_keeps_stored = true;
  DZ_ASSIGN_OR_RETURN(auto be, backend::make_backend(bo));
  model::Weights w;
  std::vector<checkpoint::WeightRecord> recs;
  DZ_RETURN_IF_ERROR(runtime::load_weights(mx, *be, w, recs, {}, {}, checkpoint::kDefaultStagingBytes, 0,
                                           plan::WeightsOnDevice::kBF16)
                         .status());
  checkpoint::SafetensorsWriter writer;
  for (const auto& spec : mx.specs) {
    const Tensor* t = spec.skip_load ? nullptr : w.find(spec.name);  // an FP4 weight's companions: none
    if (!t) continue;
    if (t->dtype() != DType::kBF16)
      return Status::Internal(spec.name + " is held in " + dtype_name(t->dtype()) + " under bfloat16");
    const auto* p = static_cast<const uint8_t*>(t->data());
    writer.add(spec.name, DType::kBF16, t->shape(), std::vector<uint8_t>(p, p + t->bytes()));
  }
  writer.set_metadata({{"format", "pt"}});
  nlohmann::json config = mx.config;
  config.erase("quantization_config");
  return tools::write_model_folder(dir, [&](const fs::path& out) -> Status {
    DZ_RETURN_IF_ERROR(writer.write((out / "model.safetensors").string()));
    std::ofstream f(out / "config.json");
    f << config.dump(2);
    if (!f.flush()) return Status::IoError((out / "config.json").string() + ": cannot write");
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      if (fs::exists(fs::path(mx.dir) / name)) fs::copy_file(fs::path(mx.dir) / name, out / name);
    return Status::Ok();
  });
}

int run_moe(const std::string& dir, const std::string& weights, int threads, int batch, int prompt, int steps,
            int repeats) {
  if (fs::exists(fs::path(dir) / "config.json")) {
    std::fprintf(stderr,
                 "decode_bench: %s is a model folder; --model moe makes %s/mxfp4 and %s/bf16 (give another --dir)\n",
                 dir.c_str(), dir.c_str(), dir.c_str());
    return 2;
  }
  tools::MakeModelOptions o;
  o.family = "qwen3_moe";
  o.out_dir = (fs::path(dir) / "mxfp4").string();
  o.shape = kMoeShape;
  o.fp4 = "mxfp4";
  int code = 0;
  auto info = bench::open_or_make_folder(o, &code);
  if (!info) return code;
  const auto& hp = info->hp;
  int64_t params = 0, expert_params = 0, fp4 = 0;
  for (const auto& s : info->specs) {
    if (s.component == model::Component::kQuantScale) continue;
    params += shape_numel(s.shape);
    if (s.component != model::Component::kRoutedExpert) continue;
    expert_params += shape_numel(s.shape);
    fp4 += model::is_stored_weight(s, StoredScheme::kMxfp4) ? 1 : 0;
  }
  if (hp.family != "qwen3_moe" || fp4 == 0) {
    std::fprintf(stderr, "decode_bench: %s holds a %s model without MXFP4 routed experts; --model moe makes its own "
                 "(give another --dir)\n", o.out_dir.c_str(), hp.family.c_str());
    return 2;
  }
  const std::string twin_dir = (fs::path(dir) / "bf16").string();
  if (!fs::exists(fs::path(twin_dir) / "config.json"))
    if (auto st = write_bf16_twin(*info, twin_dir); !st.ok()) {
      std::fprintf(stderr, "decode_bench: the bf16 twin: %s\n", st.message().c_str());
      return 3;
    }
  auto twin = model::open_model_folder(twin_dir, model::WeightsNeeded::kRequired);
  if (!twin.ok()) {
    std::fprintf(stderr, "%s\n", twin.status().message().c_str());
    return 2;
  }
  bool twin_fp4 = false;
  for (const auto& s : twin->specs) twin_fp4 |= s.stored.format != nullptr;
  if (twin->hp.family != hp.family || twin->hp.n_layer != hp.n_layer || twin->hp.n_embd != hp.n_embd ||
      twin->hp.n_expert != hp.n_expert || twin->hp.n_ff_expert != hp.n_ff_expert || twin_fp4) {
    std::fprintf(stderr, "decode_bench: %s is not the bf16 twin of %s (remove it to have it written again)\n",
                 twin_dir.c_str(), o.out_dir.c_str());
    return 2;
  }
  std::printf("model: %s, qwen3_moe, %.1fM parameters (%.1fM in routed experts, stored MXFP4; the rest bf16), "
              "n_embd %lld, %lld layers, %lld experts of n_ff %lld, %lld used a token, n_vocab %lld; "
              "its bf16 twin %s\n",
              o.out_dir.c_str(), static_cast<double>(params) * 1e-6, static_cast<double>(expert_params) * 1e-6,
              static_cast<long long>(hp.n_embd), static_cast<long long>(hp.n_layer),
              static_cast<long long>(hp.n_expert), static_cast<long long>(hp.n_ff_expert),
              static_cast<long long>(hp.n_expert_used), static_cast<long long>(hp.n_vocab),
              twin_dir.c_str());
  std::printf("backend: cpu, %d threads (%s)\n", threads, kernels::cpu::gemm_info().path.c_str());
  std::printf("decode: prompts of %d tokens, %d generated tokens each (%d forward steps), median of %d rounds, "
              "the bf16 and MXFP4 ones taking turns; load average %.2f at start\n\n",
              prompt, steps, steps - 1, repeats, load_average());
  // Both loaded, then their rounds take turns (each with its own tuned small-M settings): a
  // load that comes and goes on a shared machine falls on both alike.
  std::unique_ptr<Loaded> lb, lm;
  if (weights != "mxfp4" && !(lb = load_variant(*twin, {"bf16", plan::WeightsOnDevice::kAsStored, true}, true,
                                                 threads, prompt)))
    return 3;
  if (weights != "bf16" && !(lm = load_variant(*info, {"mxfp4", plan::WeightsOnDevice::kAsStored, true}, true,
                                                threads, prompt)))
    return 3;
  for (int r = 0; r < repeats; ++r)
    for (Loaded* L : {lb.get(), lm.get()})
      if (L) round_of(*L, hp, batch, prompt, steps);
  std::optional<Measured> bf16, mx;
  if (lb) {
    bf16 = finish(*lb);
    print("bf16 twin (the experts' MXFP4 values in bf16; as stored)", *bf16, batch);
  }
  if (lm) {
    mx = finish(*lm);
    print("MXFP4 (experts as stored, converted in the GEMM; the rest bf16 as stored)", *mx, batch);
  }
  bool same = true;
  for (const auto* m : {&bf16, &mx})
    if (*m) same &= (*m)->one.first_ids == (*m)->many.first_ids;
  std::printf("sequence 0 generated ids %s in batch 1 and batch %d\n", same ? "identical" : "DIFFER", batch);
  if (bf16 && mx) {
    const bool agree = bf16->one.first_ids == mx->one.first_ids && bf16->many.first_ids == mx->many.first_ids;
    std::printf("MXFP4 / bf16 experts: tok/s batch 1 %.2fx, batch %d %.2fx; bytes read a batch-1 token %.2fx fewer "
                "(%.1f / %.1f MB; the experts' alone %.2fx fewer), weights held %.2fx fewer (%.1f / %.1f MB); "
                "generated ids %s\n",
                mx->one.tokens_per_s / bf16->one.tokens_per_s, batch, mx->many.tokens_per_s / bf16->many.tokens_per_s,
                bf16->mb_per_token / mx->mb_per_token, bf16->mb_per_token, mx->mb_per_token,
                static_cast<double>(bf16->expert_token_bytes) / static_cast<double>(mx->expert_token_bytes),
                static_cast<double>(bf16->held_bytes) / static_cast<double>(mx->held_bytes),
                static_cast<double>(bf16->held_bytes) * 1e-6, static_cast<double>(mx->held_bytes) * 1e-6,
                agree ? "identical (same ids)" : "DIFFER");
    same &= agree;
  }
  std::printf("load average %.2f at end\n", load_average());
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, weights = "both", which = "dense";
  int batch = 8, steps = 33, prompt = 16, threads = 2, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") which = argv[i + 1];
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--prompt") prompt = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--weights") weights = argv[i + 1];
    else if (a == "--pool-spin-us") kernels::cpu::set_pool_spin_us(std::atoi(argv[i + 1]));
  }
  if (which != "dense" && which != "moe") {
    std::fprintf(stderr, "decode_bench: --model %s is not dense or moe\n", which.c_str());
    return 2;
  }
  if (which == "moe") {
    if (weights != "bf16" && weights != "mxfp4" && weights != "both") {
      std::fprintf(stderr, "decode_bench: --weights %s is not bf16, mxfp4 or both (--model moe)\n", weights.c_str());
      return 2;
    }
    return run_moe(dir.empty() ? "build/bench-decode-moe" : dir, weights, threads, batch, prompt, steps, repeats);
  }
  if (dir.empty()) dir = "build/bench-decode-bf16";
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
    f32 = measure(info, {"f32", plan::WeightsOnDevice::kF32, false}, threads, batch, prompt, steps, repeats);
    if (!f32) return 3;
    print("f32 (widened on load)", *f32, batch);
  }
  if (weights != "f32") {
    bf16 = measure(info, {"bf16", plan::WeightsOnDevice::kAsStored, true}, threads, batch, prompt, steps, repeats);
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
