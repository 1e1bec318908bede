// Internal to kernels/cpu and the CPU backend: start-up tuning of the built-in small-M kernel
// (the decode GEMM) and of the large-M path (prefill) on the weights a process holds
// (docs/gemm.md, "Chosen by measuring").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace dayzero::kernels::cpu::gemm {

// One weight to time at m = 1: w[n, k], f32 or bf16 as stored.
struct TuneWeight {
  int64_t n = 0, k = 0;
  const void* w = nullptr;
  bool bf16 = false;
};

struct SmallMCandidate {
  SmallMSettings settings;
  // Weight bytes read per second at m = 1 over the passes (its interleaved_choice score).
  double gb_s = 0;
  std::string rejected;  // why it could not be chosen ("bits differ"), empty when it could
};

struct SmallMTuning {
  SmallMSettings chosen;
  std::vector<SmallMCandidate> candidates;
  double seconds = 0;  // the measurement's wall time (0 when read from the cache)
  int passes = 0;      // interleaved passes over the pieces (0 when read from the cache)
  int pieces = 0;      // pieces of the weights a pass reads, per candidate
  std::string source;  // "measured", "cached in PATH", ...
  // "small-M kernel at m = 1: 1x1 tiles, prefetch off (measured in 169 ms: 2 passes over 72
  // pieces); m = 1 GB/s: 1/0K 26.3 1/8K 24.8 ..."
  std::string describe() const;
};

// Checks every candidate (the default against the reference twin, every other against the
// default bit for bit), times the correct ones at m = 1 on the weights (whole, a weight over
// 16 MiB in pieces), the candidates taking turns weight by weight so that all are timed at the
// same moments and a weight comes back to the next candidate only after 128 MiB of others (one
// pass, then more while one more ends within budget_s), and sets the one interleaved_choice
// picks (set_small_m_settings). With a cache_dir, a result for the same CPU model, ISA, thread count
// and weight shapes is read from there instead, and a new one written there.
SmallMTuning tune_small_m(const std::vector<TuneWeight>& weights, const std::string& cache_dir, double budget_s = 0.2);

// step_times[i][u]: candidate u's time for its piece at step i of the interleaved passes
// (every step holds every candidate, else DZ_CHECK fails). A candidate's score is the sum of its
// times, each capped at twice its step's median (a thread the OS took away for a while slows
// whichever candidate was running, not the setting); returns the candidate with the smallest
// score (-1 when there are none) and the scores in *seconds when given.
int interleaved_choice(const std::vector<std::vector<double>>& step_times, std::vector<double>* seconds);

// The cache file's key: a hash of the CPU model name, ISA, thread count, weight shapes and the
// timing method (a choice an older method made is measured again).
std::string small_m_cache_key(const std::vector<TuneWeight>& weights);

struct LargeMCandidate {
  std::string id;       // large_m_paths()'s id: "openblas", "blis", "onednn", "builtin"
  double gflop_s = 0;   // at m = kLargeMRows over the weights' shapes, best sweep
};

struct LargeMTuning {
  std::string rule;    // the fixed rule's path, before the timing
  std::string chosen;  // the path m > 16 takes now ("" when nothing was timed)
  std::vector<LargeMCandidate> candidates;
  double seconds = 0;
  std::string source;  // "measured", "cached in PATH", "one path runs every M (DAYZERO_GEMM)", ...
  // "large-M path openblas (measured in 90 ms; rule openblas); m = 128 GFLOP/s: openblas 131.2 ..."
  std::string describe() const;
};

// The rows of x the large-M paths are timed at: a prefill chunk.
inline constexpr int64_t kLargeMRows = 128;
// Another path replaces the rule's only when it is this much faster: a switch changes the
// bits of every prefill product, so it must not follow noise between near-equal paths.
inline constexpr double kLargeMSwitchMargin = 1.05;

// Times every large_m_paths() path at m = kLargeMRows on the weights' distinct shapes (each
// capped at 16 MiB of random f32 rows: the path's speed, not the weights' values), rounds
// interleaved until budget_s, and sets the fastest (set_large_m_path) when it beats the rule's
// by kLargeMSwitchMargin. With a cache_dir, a choice for the same CPU, ISA, thread count,
// shapes and libraries is read from there; a new one is written there unless another process
// wrote one meanwhile, which is then taken instead: processes that start together agree.
LargeMTuning tune_large_m(const std::vector<TuneWeight>& weights, const std::string& cache_dir, double budget_s = 0.1);

}  // namespace dayzero::kernels::cpu::gemm
