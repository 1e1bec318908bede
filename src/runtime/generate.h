// Greedy generation for one prompt: prefill, then one-token decode steps with the KV cache,
// recording the top-k logits of every step; and the teacher-forced negative log-likelihood of
// a reference continuation. Not concerned with where outputs go (the runner writes them).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "runtime/forward.h"

namespace dayzero::runtime {

struct GenerateOptions {
  int max_new_tokens = 16;
  bool stop_at_eos = true;
  std::vector<int32_t> eos_ids;
  int top_k = 5;
};

// Sinks for the dump: which one receives prefill and which decode activations (may be null).
struct GenerateSinks {
  model::ActivationSink* prefill = nullptr;
  model::ActivationSink* decode = nullptr;
};

struct Generation {
  std::vector<int32_t> generated_ids;     // [n_steps], includes the EOS that stopped it
  std::vector<float> logits_last;         // [n_vocab] at the last prompt position
  std::vector<int32_t> step_topk_ids;     // [n_steps, top_k]
  std::vector<float> step_topk_logits;    // [n_steps, top_k]
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_tokens = 0;              // forward passes of one token
  bool stopped_at_eos = false;
};

Generation generate(Forward& fwd, Backend& be, const model::HParams& hp, std::span<const int32_t> prompt,
                    const GenerateOptions& opts, const GenerateSinks& sinks);

// Mean negative log-likelihood (nats per token) of `continuation` after `prompt`, teacher-forced
// in one forward pass. REQUIRES: both non-empty.
double reference_nll(Forward& fwd, Backend& be, const model::HParams& hp, std::span<const int32_t> prompt,
                     std::span<const int32_t> continuation);

// The k largest values of x[n] with their indices, largest first, lower index first on ties.
void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values);

}  // namespace dayzero::runtime
