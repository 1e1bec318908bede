// stream_bench: the m = 1 GEMM (batch-1 decode) streaming weights from memory, by weight size:
// many distinct weights of n x k (384 MiB in all, past the caches), read one call after another
// as a decode step does, on the pool's shares (what the small-M kernel runs), on fixed chunks
// from one counter (the threads' chunks interleaved in w, as the guided chunks it replaced
// were), and on two static halves; each against a plain read of the same bytes in the same
// round (bench/plain_read.h: the best of no prefetch, one to L1 and one to L2). Shows what a
// schedule costs a small weight, where a call's start and end are a larger part of it. Prints
// GB/s, best of --rounds, the schedules taking turns.
//
//   stream_bench [--threads 2] [--rounds 5] [--k 768] [--dtype f32|bf16|both]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "plain_read.h"

namespace {

using namespace dayzero;
namespace cpu = kernels::cpu;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The small-M kernel on rows [j0, j1) of one weight (a nested call: it runs on this thread).
void rows_m1(bool bf16, int64_t k, const float* x, const void* w, float* y, int64_t j0, int64_t j1) {
  if (j1 <= j0) return;
  if (bf16) {
    cpu::gemm::matmul_nt_small_bf16(1, j1 - j0, k, x, static_cast<const uint16_t*>(w) + j0 * k, y + j0, 0.0f);
  } else {
    cpu::gemm::builtin()->matmul_nt(1, j1 - j0, k, x, static_cast<const float*>(w) + j0 * k, y + j0, 0.0f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 5;
  int64_t k = 768;
  std::string dtypes = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--k") k = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--dtype") dtypes = argv[i + 1];
    else {
      std::fprintf(stderr, "stream_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  cpu::gemm_set_threads(threads);
  const size_t total = size_t{384} << 20;
  HostArena arena(total);
  Tensor slab = arena.take(DType::kU8, {static_cast<int64_t>(total)});
  auto* bytes = static_cast<uint8_t*>(slab.data());
  for (size_t i = 0; i < total / 2; ++i) reinterpret_cast<uint16_t*>(bytes)[i] = static_cast<uint16_t>(0x3c00 + i % 97);
  std::vector<float> x(static_cast<size_t>(k), 0.01f);
  std::printf("stream_bench: m = 1 over distinct n x %lld weights, %zu MiB in all, %d threads, best of %d rounds\n",
              static_cast<long long>(k), total >> 20, threads, rounds);
  std::printf("| dtype | n | MB a weight | plain read GB/s | shares | fixed chunks (interleaved) | static halves |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const bool bf16 : {false, true}) {
    if ((bf16 && dtypes == "f32") || (!bf16 && dtypes == "bf16")) continue;
    const int64_t elem = bf16 ? 2 : 4;
    for (const int64_t n : {192, 768, 2304, 5120, 65536}) {
      const int64_t per = n * k * elem;
      const int64_t count = static_cast<int64_t>(total) / per;
      if (count < 1) continue;
      std::vector<float> y(static_cast<size_t>(n));
      const auto nr = static_cast<int64_t>(cpu::gemm::small_m_settings().m1_rows);
      const int64_t tiles = (n + nr - 1) / nr;
      // schedule 0: shares (the kernel's own call); 1: fixed chunks of a 1/32 share a thread from
      // one counter; 2: two static halves.
      const std::function<void(const void*)> schedules[3] = {
          [&](const void* w) { rows_m1(bf16, k, x.data(), w, y.data(), 0, n); },
          [&](const void* w) {
            cpu::parallel_for(tiles, std::max<int64_t>(1, tiles / (threads * 16)), [&](int64_t t0, int64_t t1) {
              rows_m1(bf16, k, x.data(), w, y.data(), t0 * nr, std::min(n, t1 * nr));
            });
          },
          [&](const void* w) {
            cpu::parallel_for(threads, 1, [&](int64_t h0, int64_t h1) {
              for (int64_t h = h0; h < h1; ++h)
                rows_m1(bf16, k, x.data(), w, y.data(), n * h / threads, n * (h + 1) / threads);
            });
          }};
      const std::vector<std::pair<const float*, int64_t>> span = {{reinterpret_cast<const float*>(bytes), count * per / 4}};
      double best[4] = {0, 0, 0, 0};
      for (int r = 0; r < rounds; ++r) {
        best[3] = std::max(best[3], bench::plain_read_gb_s(span, 3));
        for (int s = 0; s < 3; ++s) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t c = 0; c < count; ++c) schedules[s](bytes + c * per);
          best[s] = std::max(best[s], static_cast<double>(count * per) / seconds_since(t0) * 1e-9);
        }
      }
      std::printf("| %s | %lld | %.2f | %.1f | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) |\n", bf16 ? "bf16" : "f32",
                  static_cast<long long>(n), static_cast<double>(per) / 1e6, best[3], best[0], best[0] / best[3],
                  best[1], best[1] / best[3], best[2], best[2] / best[3]);
    }
  }
  return 0;
}
