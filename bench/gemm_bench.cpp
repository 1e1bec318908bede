// gemm_bench: GFLOP/s of every GEMM path this machine has (OpenBLAS as detected and forced
// to each core the CPU runs, BLIS, the built-in kernel, and OpenBLAS sgemm at m = 1) at LLM
// shapes, for each thread count, plus the path the library picks by itself. Prints Markdown
// tables (docs/gemm.md quotes them). Not a test: it checks sampled elements against a double
// loop and reports the worst error, but does not fail on it.
//
//   gemm_bench [--threads=1,2] [--m=1,16,128,512] [--nk=1024,2816,4096] [--seconds=0.05] [--rounds=3]
//              [--shapes=768x768,2560x768,...]   (n x k pairs instead of the --nk grid)
//              [--detected-core-only]            (no OpenBLAS cores forced)
//              [--cpu-time]                      (GFLOP per CPU-second of the process, all its
//                                                 threads, instead of per wall second: on a loaded
//                                                 machine it ranks the paths by their own cost)
//              [--stored]                        (also matmul_nt_bf16 and matmul_nt_stored on the
//                                                 same weights kept as stored: FP8 (the weights
//                                                 are then FP8 values, so all three compute the
//                                                 same product, and the pool exceeds the cache at
//                                                 one byte each), and INT4 in groups of 32 with
//                                                 bf16 scales and MXFP4 (E2M1, a UE8M0 scale per
//                                                 32), whose sampled errors are the quantizations')
// Candidates also include oneDNN and "selected" (what matmul_nt runs, the rule by rows).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "checkpoint/fp4.h"
#include "checkpoint/pack_quantized.h"
#include "kernels/ops.h"

namespace {

using namespace dayzero::kernels::cpu;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

struct Options {
  std::vector<int64_t> threads = {1, 2}, ms = {1, 16, 128, 512}, nks = {1024, 2816, 4096};
  std::vector<std::pair<int64_t, int64_t>> pairs;  // (n, k); replaces the nks grid when given
  double seconds = 0.05;  // per timed batch
  int rounds = 3;         // interleaved batches per candidate and shape; the best is reported
  bool detected_core_only = false;
  bool cpu_time = false;
  bool stored = false;
};

bool g_cpu_time = false;  // --cpu-time
bool g_stored = false;    // --stored

// Seconds on the clock the figures use: wall (steady) or the process's CPU time.
double now_s() {
  if (g_cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// A GEMM under test.
struct Candidate {
  std::string label;
  const void* library = nullptr;  // candidates of one library follow each other without a pause
  std::function<void()> prepare;  // e.g. force an OpenBLAS core; cheap, runs before every batch
  std::function<void(int)> set_threads;
  std::function<void(int64_t, int64_t, int64_t, const float*, const float*, float*)> run;
  bool m1_only = false;
};

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);

void fill(std::vector<float>& v, uint32_t seed) {
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
  }
}

// The E4M3 byte of a value in [-1, 1) by truncation (exact for the FP8 values themselves), and
// the value of a byte.
uint8_t fp8_byte_near(float f) {
  const uint8_t sign = f < 0 ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a < 0x1p-9f) return sign;
  int e;
  const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  if (e - 1 < -6) return static_cast<uint8_t>(sign | static_cast<int>(a * 512.0f));  // subnormal
  return static_cast<uint8_t>(sign | ((e - 1 + 7) << 3) | (static_cast<int>(m * 16.0f) - 8));
}
float fp8_e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

// Worst relative error (to sum |x w|) of 64 sampled elements of y against a double loop.
double sampled_error(int64_t m, int64_t n, int64_t k, const float* x, const float* w, const float* y) {
  double worst = 0;
  uint32_t s = 12345;
  for (int e = 0; e < 64; ++e) {
    s = s * 1664525u + 1013904223u;
    const int64_t i = (s >> 8) % m;
    s = s * 1664525u + 1013904223u;
    const int64_t j = (s >> 8) % n;
    double ref = 0, mag = 0;
    for (int64_t p = 0; p < k; ++p) {
      ref += double(x[i * k + p]) * w[j * k + p];
      mag += std::fabs(double(x[i * k + p]) * w[j * k + p]);
    }
    worst = std::max(worst, std::fabs(y[i * n + j] - ref) / mag);
  }
  return worst;
}

// Weight copies per (n, k), made once and shared by every candidate: enough to exceed the
// last-level cache several times over, as a model's layers never find their weights
// cached (and m = 1 is bound by that stream).
const std::vector<std::vector<float>>& weight_pool(int64_t n, int64_t k) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<float>>> pools;
  auto& pool = pools[{n, k}];
  if (pool.empty()) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 <= 0) l3 = 32 << 20;
    const int64_t w_bytes = n * k * (g_stored ? 1 : 4);
    const int64_t copies = std::clamp<int64_t>((3 * l3 + w_bytes - 1) / w_bytes, 1, 64);
    pool.assign(copies, std::vector<float>(n * k));
    for (int64_t i = 0; i < copies; ++i) fill(pool[i], 7 + static_cast<uint32_t>(i));
    if (g_stored)
      for (auto& w : pool)
        for (float& f : w) f = fp8_e4m3_value(fp8_byte_near(f));
  }
  return pool;
}

// The weights of the pool as stored: bf16 (exact: FP8 values have 3 mantissa bits) and E4M3
// with scales of 1 in 128 x 128 blocks, made on first use.
struct StoredTwins {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> fp8;
  std::vector<float> scale;
  StoredWeight view;
  std::vector<uint8_t> int4;        // [n, 4 x words(k)]: the packed int32 words' bytes
  std::vector<uint16_t> int4_scale;  // [n, groups of 32] bf16
  StoredWeight int4_view;
  dayzero::checkpoint::Fp4Packed mxfp4;  // [n, k / 2] codes, [n, groups of 32] UE8M0
  StoredWeight mxfp4_view;
};

// INT4 in groups of 32 as compressed-tensors' observer packs it (checkpoint::pack_quantize).
void quantize_int4(const float* w, int64_t n, int64_t k, StoredTwins& s) {
  const dayzero::checkpoint::PackQuant quant;  // 4 bits, groups of 32
  dayzero::checkpoint::PackedWeight packed = dayzero::checkpoint::pack_quantize(w, n, k, quant);
  const auto* bytes = reinterpret_cast<const uint8_t*>(packed.packed.data());
  s.int4.assign(bytes, bytes + packed.packed.size() * 4);
  s.int4_scale = std::move(packed.scale_bf16);
  s.int4_view = {dayzero::StoredScheme::kInt4Group, s.int4.data(), s.int4_scale.data(), quant.words(k) * 4,
                 quant.groups(k), 0, 0, 1, quant.group_size};
}

const StoredTwins& stored(const float* w, int64_t n, int64_t k) {
  static std::map<const float*, StoredTwins> made;
  StoredTwins& s = made[w];
  if (s.fp8.empty()) {
    s.bf16.resize(static_cast<size_t>(n * k));
    s.fp8.resize(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n * k; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w[i], 4);
      s.bf16[static_cast<size_t>(i)] = static_cast<uint16_t>(bits >> 16);
      s.fp8[static_cast<size_t>(i)] = fp8_byte_near(w[i]);
    }
    s.scale.assign(static_cast<size_t>((n + 127) / 128 * ((k + 127) / 128)), 1.0f);
    s.view = {dayzero::StoredScheme::kFp8Block, s.fp8.data(), s.scale.data(), k, (k + 127) / 128, 0, 0, 128, 128};
    quantize_int4(w, n, k, s);
    s.mxfp4 = dayzero::checkpoint::fp4_quantize(w, n, k, dayzero::StoredScheme::kMxfp4);
    s.mxfp4_view = {dayzero::StoredScheme::kMxfp4, s.mxfp4.packed.data(), s.mxfp4.scale.data(), (k + 1) / 2,
                    (k + 31) / 32, 0, 0, 1, 32};
  }
  return s;
}

// GFLOP/s of one timed batch (at least `seconds`, at least one call) after one untimed call.
double time_batch(const Candidate& c, int64_t m, int64_t n, int64_t k, const float* x, float* y,
                  const std::vector<std::vector<float>>& ws, double seconds) {
  const int64_t copies = static_cast<int64_t>(ws.size());
  c.run(m, n, k, x, ws[0].data(), y);
  int64_t calls = 0, next = 1;
  const double t0 = now_s();
  double elapsed = 0;
  do {
    c.run(m, n, k, x, ws[next++ % copies].data(), y);
    ++calls;
    elapsed = now_s() - t0;
  } while (elapsed < seconds);
  return 2.0 * m * n * k * calls / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strncmp(a, "--threads=", 10)) opt.threads = parse_list(a + 10);
    else if (!std::strncmp(a, "--m=", 4)) opt.ms = parse_list(a + 4);
    else if (!std::strncmp(a, "--nk=", 5)) opt.nks = parse_list(a + 5);
    else if (!std::strncmp(a, "--seconds=", 10)) opt.seconds = std::atof(a + 10);
    else if (!std::strncmp(a, "--rounds=", 9)) opt.rounds = std::max(1, std::atoi(a + 9));
    else if (!std::strcmp(a, "--detected-core-only")) opt.detected_core_only = true;
    else if (!std::strcmp(a, "--cpu-time")) opt.cpu_time = g_cpu_time = true;
    else if (!std::strcmp(a, "--stored")) opt.stored = g_stored = true;
    else if (!std::strncmp(a, "--shapes=", 9)) {
      std::stringstream ss(a + 9);
      for (std::string item; std::getline(ss, item, ',');) {
        const size_t x = item.find('x');
        if (x == std::string::npos) return 2;
        opt.pairs.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
      }
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads=1,2] [--m=1,16,128,512] [--nk=1024,2816,4096] [--seconds=0.05] "
                   "[--rounds=3] [--stored]\n",
                   argv[0]);
      return 2;
    }
  }

  // The library's own choice comes first, before the bench moves the OpenBLAS core around.
  const GemmInfo& info = gemm_info();
  const gemm::CpuIsa isa = gemm::detect_isa();
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  // Other processes on the same cores pull every figure down; say how busy the machine was.
  std::printf("cpu: %s, %ld CPUs online, load average %.2f at start\n", isa.describe().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), load[0]);
  std::printf("auto-selected: %s\n", info.path.c_str());
  const std::string selected_name = gemm::selected_path().name();

  std::vector<Candidate> candidates;
  std::string why;
  gemm::OpenBlas* ob = gemm::OpenBlas::get(&why);
  gemm::GemmPath* blis = gemm::blis(nullptr);
  std::string chosen_core;
  if (ob) {
    chosen_core = ob->core();
    std::vector<std::string> cores = {ob->detected_core()};
    if (chosen_core != ob->detected_core()) cores.push_back(chosen_core);
    for (const char* core : {"Prescott", "Sandybridge", "Haswell", "Zen", "SkylakeX"}) {
      gemm::IsaClass cls;
      gemm::openblas_core_class(core, &cls);
      if (opt.detected_core_only) break;
      if (cls <= isa.best && std::find(cores.begin(), cores.end(), core) == cores.end()) cores.push_back(core);
    }
    for (const std::string& core : cores) {
      std::string label = "openblas " + core;
      if (core == ob->detected_core()) label += " (detected)";
      candidates.push_back({label, ob,
                            [ob, core] {
                              std::string err;
                              if (!ob->force_core(core, &err)) std::fprintf(stderr, "%s\n", err.c_str());
                            },
                            [ob](int t) { ob->set_threads(t); },
                            [ob](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                              ob->matmul_nt(m, n, k, x, w, y, 0.0f);
                            }});
    }
    // What m = 1 costs without the switch to sgemv.
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    auto sgemm = h ? reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm")) : nullptr;
    if (sgemm) {
      candidates.push_back({"openblas " + chosen_core + " sgemm at m=1", ob,
                            [ob, chosen_core] {
                              std::string err;
                              ob->force_core(chosen_core, &err);
                            },
                            [ob](int t) { ob->set_threads(t); },
                            [sgemm](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                              sgemm(101, 111, 112, int(m), int(n), int(k), 1.0f, x, int(k), w, int(k), 0.0f, y,
                                    int(n));
                            },
                            true});
    }
  } else {
    std::printf("openblas: %s\n", why.c_str());
  }
  if (blis) {
    candidates.push_back({blis->name(), blis, [] {}, [blis](int t) { blis->set_threads(t); },
                          [blis](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            blis->matmul_nt(m, n, k, x, w, y, 0.0f);
                          }});
  }
  gemm::GemmPath* dnnl = gemm::onednn(nullptr);
  if (dnnl) candidates.push_back({dnnl->name(), dnnl, [] {}, [dnnl](int t) { dnnl->set_threads(t); },
                        [dnnl](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                          dnnl->matmul_nt(m, n, k, x, w, y, 0.0f);
                        }});
  // What matmul_nt runs: the selection's rule by rows (the OpenBLAS core as selected).
  candidates.push_back({"selected", &info,
                        [ob, chosen_core] {
                          std::string err;
                          if (ob) ob->force_core(chosen_core, &err);
                        },
                        [](int t) { gemm_set_threads(t); },
                        [](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                          matmul_nt(m, n, k, x, w, y);
                        }});
  if (opt.stored) {
    candidates.push_back({"selected bf16", &info, [] {}, [](int t) { gemm_set_threads(t); },
                          [](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            matmul_nt_bf16(m, n, k, x, stored(w, n, k).bf16.data(), y);
                          }});
    candidates.push_back({"selected fp8", &info, [] {}, [](int t) { gemm_set_threads(t); },
                          [](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            matmul_nt_stored(m, n, k, x, stored(w, n, k).view, y);
                          }});
    candidates.push_back({"selected int4", &info, [] {}, [](int t) { gemm_set_threads(t); },
                          [](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            matmul_nt_stored(m, n, k, x, stored(w, n, k).int4_view, y);
                          }});
    candidates.push_back({"selected mxfp4", &info, [] {}, [](int t) { gemm_set_threads(t); },
                          [](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            matmul_nt_stored(m, n, k, x, stored(w, n, k).mxfp4_view, y);
                          }});
  }
  gemm::GemmPath* own = gemm::builtin();
  candidates.push_back({own->name(), own, [] {}, [own](int t) { own->set_threads(t); },
                        [own](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                          own->matmul_nt(m, n, k, x, w, y, 0.0f);
                        }});

  struct ShapeRow {
    int64_t m, n, k;
  };
  std::vector<ShapeRow> shapes;
  if (opt.pairs.empty()) {
    for (int64_t n : opt.nks)
      for (int64_t k : opt.nks) opt.pairs.push_back({n, k});
  }
  for (int64_t m : opt.ms)
    for (const auto& [n, k] : opt.pairs) shapes.push_back({m, n, k});

  for (int64_t threads : opt.threads) {
    // gflops[c][s], error[c][s]. Candidates take turns within each round, so a burst of load
    // from elsewhere lands on one round of every candidate rather than on one candidate.
    std::vector<std::vector<double>> gflops(candidates.size(), std::vector<double>(shapes.size()));
    std::vector<std::vector<double>> error = gflops;
    for (size_t s = 0; s < shapes.size(); ++s) {
      const auto [m, n, k] = shapes[s];
      const auto& ws = weight_pool(n, k);
      if (opt.stored)
        for (const auto& w : ws) stored(w.data(), n, k);  // made before any timing
      std::vector<float> x(m * k), y(m * n);
      fill(x, 3);
      const void* running = nullptr;
      for (int round = 0; round < opt.rounds; ++round) {
        for (size_t c = 0; c < candidates.size(); ++c) {
          const Candidate& cand = candidates[c];
          if (cand.m1_only && m != 1) continue;
          if (cand.library != running) {
            // Idle BLAS pools spin for up to ~0.1 s after a call; shrink the previous one and
            // let it fall asleep before timing another library on the same cores.
            for (const Candidate& other : candidates) {
              if (other.library == running && running != nullptr) {
                other.set_threads(1);
                break;
              }
            }
            if (running != nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(150));
            running = cand.library;
          }
          cand.prepare();
          cand.set_threads(static_cast<int>(threads));
          gflops[c][s] = std::max(gflops[c][s], time_batch(cand, m, n, k, x.data(), y.data(), ws, opt.seconds));
          if (round == 0) {
            cand.run(m, n, k, x.data(), ws[0].data(), y.data());
            error[c][s] = sampled_error(m, n, k, x.data(), ws[0].data(), y.data());
          }
        }
      }
    }
    std::printf("\n### %lld thread%s (GFLOP per %s second, best of %d interleaved rounds; * = best in row)\n\n| m | n | k |",
                static_cast<long long>(threads), threads == 1 ? "" : "s", opt.cpu_time ? "CPU" : "wall", opt.rounds);
    for (const Candidate& c : candidates) std::printf(" %s |", c.label.c_str());
    std::printf("\n|---|---|---|");
    for (size_t c = 0; c < candidates.size(); ++c) std::printf("---|");
    std::printf("\n");
    for (size_t s = 0; s < shapes.size(); ++s) {
      double best = 0;
      for (size_t c = 0; c < candidates.size(); ++c) best = std::max(best, gflops[c][s]);
      std::printf("| %lld | %lld | %lld |", static_cast<long long>(shapes[s].m), static_cast<long long>(shapes[s].n),
                  static_cast<long long>(shapes[s].k));
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (gflops[c][s] == 0) {
          std::printf(" - |");
        } else {
          std::printf(" %.1f%s |", gflops[c][s], gflops[c][s] == best ? "*" : "");
        }
      }
      std::printf("\n");
    }
    std::printf("| | | worst sampled error |");
    for (size_t c = 0; c < candidates.size(); ++c) {
      std::printf(" %.1e |", *std::max_element(error[c].begin(), error[c].end()));
    }
    std::printf("\n");
  }
  // Leave the process as the selection set it.
  if (ob && selected_name.rfind("openblas", 0) == 0) {
    std::string err;
    ob->force_core(chosen_core, &err);
  }
  getloadavg(load, 3);
  std::printf("\nload average %.2f at end\nauto-selected: %s\n", load[0], info.path.c_str());
  return 0;
}
