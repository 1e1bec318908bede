// The bound a weight-streaming benchmark is held to: a plain read of the same bytes (eight sums
// at the machine's vector width, on dayzero's pool), the best of rounds that take turns without
// a software prefetch, with one 8 KiB ahead into every level (prefetcht0) and with one into L2
// (prefetcht2, as the small-M kernel prefetches on Intel): which streams fastest depends on the
// machine (on a 2-vCPU AVX2 EPYC a prefetch cost 15-25 %; on a 2-vCPU AVX-512 Xeon the three
// read within 5 % of each other, and its m = 1 GEMMs still read 5-10 % faster than any of them:
// docs/performance.md), and the bound is the fastest. Shared by the benches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace dayzero::bench {

// GB/s of the fastest of `rounds` reads of `spans` ((pointer, floats): a bf16 tensor is read as
// half as many floats, its bytes all the same), the modes taking turns from round 0.
inline double plain_read_gb_s(const std::vector<std::pair<const float*, int64_t>>& spans, int rounds) {
  constexpr int64_t kChunk = 65536;  // floats (256 KiB)
  std::vector<std::pair<const float*, int64_t>> chunks;
  int64_t total = 0;
  for (const auto& [p, n] : spans) {
    for (int64_t i = 0; i < n; i += kChunk) chunks.push_back({p + i, std::min(kChunk, n - i)});
    total += n;
  }
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < rounds; ++r) {
    const int mode = r % 3;  // 0: prefetch to L1, 1: none, 2: prefetch to L2
    std::vector<float> part(chunks.size());
    const int64_t t0 = monotonic_ns();
    kernels::cpu::parallel_for(static_cast<int64_t>(chunks.size()), 4, [&](int64_t c0, int64_t c1) {
      // The machine's own vector width (simd::Vec: 16 floats on AVX-512, 8 on AVX2) and eight
      // independent sums: on AVX2 a 64-byte GCC vector with four sums read at 12.0 GB/s where
      // this reads 21 GB/s (the bound decode must be held to, not one it beats).
      namespace simd = kernels::cpu::simd;
      constexpr int64_t kStep = 8 * simd::kLanes;
      for (int64_t c = c0; c < c1; ++c) {
        const auto [p, n] = chunks[c];
        simd::Vec acc[8];
        for (auto& v : acc) v = simd::zero();
        int64_t i = 0;
        for (; i + kStep <= n; i += kStep) {
          if (mode == 0) __builtin_prefetch(p + i + 2048, 0, 3);
          if (mode == 2) __builtin_prefetch(p + i + 2048, 0, 1);
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) acc[k] = simd::add(acc[k], simd::load(p + i + k * simd::kLanes));
        }
        float sum = 0;
        for (; i < n; ++i) sum += p[i];
        for (int k = 0; k < 8; ++k) sum += simd::hsum(acc[k]);
        part[c] = sum;
      }
    });
    const double sec = static_cast<double>(monotonic_ns() - t0) * 1e-9;
    float sum = 0;
    for (float x : part) sum += x;
    sink = sink + sum;
    best = std::max(best, static_cast<double>(total) * 4 / sec * 1e-9);
  }
  return best;
}

}  // namespace dayzero::bench
