// gemm_bench: GFLOP/s of every GEMM path this machine has (OpenBLAS as detected and forced
// to each core the CPU runs, BLIS, the built-in kernel, and OpenBLAS sgemm at m = 1) at LLM
// shapes, for each thread count, plus the path the library picks by itself. Prints Markdown
// tables (docs/gemm.md quotes them). Not a test: it checks sampled elements against a double
// loop and reports the worst error, but does not fail on it.
//
//   gemm_bench [--threads=1,2] [--m=1,16,128,512] [--nk=1024,2816,4096] [--seconds=0.1]
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
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
  double seconds = 0.1;  // per timed batch; the best of three batches is reported
};

// A GEMM under test: how to run it and how to prepare the process for it.
struct Candidate {
  std::string label;
  std::function<void()> prepare;  // e.g. force an OpenBLAS core
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

// Worst relative error of 64 sampled elements of y against a double loop.
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

struct Measure {
  double gflops = 0, error = 0;
};

// Weight copies per (n, k), made once and shared by every candidate. Enough copies to
// exceed the last-level cache several times over: a model's layers never find their
// weights cached, and m = 1 is bound by that stream.
const std::vector<std::vector<float>>& weight_pool(int64_t n, int64_t k) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<float>>> pools;
  auto& pool = pools[{n, k}];
  if (pool.empty()) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 <= 0) l3 = 32 << 20;
    const int64_t w_bytes = n * k * 4;
    const int64_t copies = std::clamp<int64_t>((3 * l3 + w_bytes - 1) / w_bytes, 1, 64);
    pool.assign(copies, std::vector<float>(n * k));
    for (int64_t i = 0; i < copies; ++i) fill(pool[i], 7 + static_cast<uint32_t>(i));
  }
  return pool;
}

Measure measure(const Candidate& c, int64_t m, int64_t n, int64_t k, double seconds) {
  const auto& ws = weight_pool(n, k);
  const int64_t copies = static_cast<int64_t>(ws.size());
  std::vector<float> x(m * k), y(m * n);
  fill(x, 3);
  c.run(m, n, k, x.data(), ws[0].data(), y.data());
  Measure r;
  r.error = sampled_error(m, n, k, x.data(), ws[0].data(), y.data());
  int64_t next = 0;
  for (int batch = 0; batch < 3; ++batch) {
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      c.run(m, n, k, x.data(), ws[next++ % copies].data(), y.data());
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < seconds);
    r.gflops = std::max(r.gflops, 2.0 * m * n * k * calls / elapsed / 1e9);
  }
  return r;
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
    else {
      std::fprintf(stderr, "usage: %s [--threads=1,2] [--m=1,16,128,512] [--nk=1024,2816,4096] [--seconds=0.1]\n",
                   argv[0]);
      return 2;
    }
  }

  // The library's own choice comes first, before the bench moves the OpenBLAS core around.
  const GemmInfo& info = gemm_info();
  const gemm::CpuIsa isa = gemm::detect_isa();
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  // Other processes on the same cores make every figure below too low; say so up front.
  std::printf("cpu: %s, %ld CPUs online, load average %.2f\n", isa.describe().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN), load[0]);
  std::printf("auto-selected: %s\n", info.path.c_str());
  const std::string selected_name = gemm::selected_path().name();

  std::vector<Candidate> candidates;
  std::string why;
  gemm::OpenBlas* ob = gemm::OpenBlas::get(&why);
  gemm::GemmPath* blis = gemm::blis(nullptr);
  auto quiet_others = [&](const void* keep) {
    // Idle BLAS thread pools spin for a while after each call; keep them at one thread and
    // let them fall asleep, so they do not steal the cores from the path being timed.
    if (ob && keep != ob) ob->set_threads(1);
    if (blis && keep != blis) blis->set_threads(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  if (ob) {
    const std::string chosen = ob->core();
    std::vector<std::string> cores = {ob->detected_core()};
    for (const char* core : {"Prescott", "Sandybridge", "Haswell", "Zen", "SkylakeX"}) {
      gemm::IsaClass cls;
      gemm::openblas_core_class(core, &cls);
      if (cls <= isa.best && std::find(cores.begin(), cores.end(), core) == cores.end()) cores.push_back(core);
    }
    if (std::find(cores.begin(), cores.end(), chosen) == cores.end()) cores.push_back(chosen);
    for (const std::string& core : cores) {
      std::string label = "openblas " + core;
      if (core == ob->detected_core()) label += " (detected)";
      candidates.push_back({label,
                            [ob, core, &quiet_others] {
                              std::string err;
                              if (!ob->force_core(core, &err)) std::fprintf(stderr, "%s\n", err.c_str());
                              quiet_others(ob);
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
      candidates.push_back({"openblas " + chosen + " sgemm at m=1",
                            [ob, chosen, &quiet_others] {
                              std::string err;
                              ob->force_core(chosen, &err);
                              quiet_others(ob);
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
    candidates.push_back({blis->name(), [&quiet_others, blis] { quiet_others(blis); },
                          [blis](int t) { blis->set_threads(t); },
                          [blis](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                            blis->matmul_nt(m, n, k, x, w, y, 0.0f);
                          }});
  }
  gemm::GemmPath* own = gemm::builtin();
  candidates.push_back({own->name(), [&quiet_others, own] { quiet_others(own); },
                        [own](int t) { own->set_threads(t); },
                        [own](int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
                          own->matmul_nt(m, n, k, x, w, y, 0.0f);
                        }});

  struct ShapeRow {
    int64_t m, n, k;
  };
  std::vector<ShapeRow> shapes;
  for (int64_t m : opt.ms)
    for (int64_t n : opt.nks)
      for (int64_t k : opt.nks) shapes.push_back({m, n, k});

  for (int64_t threads : opt.threads) {
    // results[c][s]
    std::vector<std::vector<Measure>> results(candidates.size(), std::vector<Measure>(shapes.size()));
    for (size_t c = 0; c < candidates.size(); ++c) {
      candidates[c].prepare();
      candidates[c].set_threads(static_cast<int>(threads));
      for (size_t s = 0; s < shapes.size(); ++s) {
        if (candidates[c].m1_only && shapes[s].m != 1) continue;
        results[c][s] = measure(candidates[c], shapes[s].m, shapes[s].n, shapes[s].k, opt.seconds);
      }
    }
    std::printf("\n### %lld thread%s (GFLOP/s; * = best in row)\n\n| m | n | k |", static_cast<long long>(threads),
                threads == 1 ? "" : "s");
    for (const Candidate& c : candidates) std::printf(" %s |", c.label.c_str());
    std::printf("\n|---|---|---|");
    for (size_t c = 0; c < candidates.size(); ++c) std::printf("---|");
    std::printf("\n");
    for (size_t s = 0; s < shapes.size(); ++s) {
      double best = 0;
      for (size_t c = 0; c < candidates.size(); ++c) best = std::max(best, results[c][s].gflops);
      std::printf("| %lld | %lld | %lld |", static_cast<long long>(shapes[s].m), static_cast<long long>(shapes[s].n),
                  static_cast<long long>(shapes[s].k));
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (results[c][s].gflops == 0) {
          std::printf(" - |");
        } else {
          std::printf(" %.1f%s |", results[c][s].gflops, results[c][s].gflops == best ? "*" : "");
        }
      }
      std::printf("\n");
    }
    std::printf("| | | worst sampled rel. error |");
    for (size_t c = 0; c < candidates.size(); ++c) {
      double worst = 0;
      for (const Measure& r : results[c]) worst = std::max(worst, r.error);
      std::printf(" %.1e |", worst);
    }
    std::printf("\n");
  }
  // Leave the process as the selection set it.
  if (ob) {
    std::string err;
    const std::string selected_core = selected_name.rfind("openblas", 0) == 0
                                          ? selected_name.substr(selected_name.rfind(' ') + 1)
                                          : ob->detected_core();
    ob->force_core(selected_core, &err);
  }
  std::printf("\nauto-selected: %s\n", info.path.c_str());
  return 0;
}
