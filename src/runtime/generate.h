// Greedy generation: prefill of one prompt, then one-token decode steps with the KV cache for a
// batch of prefilled prompts decoded together (one forward per step over the live sequences),
// recording the top-k logits of every step; and the teacher-forced negative log-likelihood of
// a reference continuation. Not concerned with where outputs go (the runner writes them).
#pragma once

#include <functional>
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
  // decode_batch only, may be empty: called at every step once the step's tokens are known on
  // every rank, with the live sequences' indices and their new tokens (same order); returns, for
  // each, whether it leaves the batch now besides EOS and max_new_tokens (a stop string, a client
  // gone, a deadline). It must return the same on every rank of the replica: the caller agrees it.
  std::function<std::vector<char>(std::span<const size_t> live, std::span<const int32_t> tokens)> step_end;
  // decode_batch only, may be empty (greedy: the argmax): the token of sequence `seq` from its
  // logits [n_vocab], on every rank of the last stage. It must pick the same token on each of
  // them (a sampler seeded alike on every rank).
  std::function<int32_t(size_t seq, const float* logits)> pick;
};


struct Generation {
  std::vector<int32_t> generated_ids;     // [n_steps], includes the EOS that stopped it
  std::vector<float> logits_last;         // [n_vocab] at the last prompt position
  std::vector<int32_t> step_topk_ids;     // [n_steps, top_k]
  std::vector<float> step_topk_logits;    // [n_steps, top_k]
  double prefill_seconds = 0;
  // This sequence's share of the batch's decode wall time: each step's time (argmax, the
  // token broadcast, the forward) divided equally among the sequences live in that step, so
  // the shares of a batch add up to its wall time and tokens / seconds summed over the
  // sequences is the batch's throughput.
  double decode_seconds = 0;
  int64_t decode_tokens = 0;              // decode rows this sequence contributed (one per forward step)
  bool stopped_at_eos = false;
};

// A prompt after prefill: its cache, the last-position logits (last stage) and the record so far.
struct Sequence {
  KvCache cache;
  Tensor logits;     // [1, n_vocab] on the last stage
  int64_t pos = 0;   // next position
  Generation gen;
};

// Prefill of one prompt. Collective over the replica's tp and pp groups. Stages overlap when
// several prompts are prefilled back to back: stage s starts prompt i + 1 while stage s + 1
// still works on prompt i (hidden states travel with blocking send/recv).
// images (multimodal families): the prompt's images, whose placeholders prompt already carries
// expanded (model::blocks::expand_image_placeholders).
Sequence prefill(Forward& fwd, const model::HParams& hp, std::span<const int32_t> prompt, const GenerateOptions& opts,
                 model::ActivationSink* sink, std::span<const image::ProcessedImage> images = {});
// Greedy decode of prefilled prompts together: each step runs one forward over every live
// sequence (one row each, each on its own cache); a sequence leaves the batch, and its cache is
// released, when it emits an EOS (with stop_at_eos) or its max_new_tokens-th token. The next
// tokens of all live sequences travel in one pp broadcast per step, so every stage agrees on
// the live set. sinks[i] (may be null; sinks may be empty) receives sequence i's decode rows.
// on_leave(i), when given, is called as sequence i leaves (after its last token, on every
// stage). Returns one Generation per sequence, in order.
// Collective over tp and pp: every rank of the replica calls it with the same batch.
// REQUIRES: sinks empty or sinks.size() == seqs.size().
std::vector<Generation> decode_batch(Forward& fwd, const model::HParams& hp, std::vector<Sequence>&& seqs,
                                     const GenerateOptions& opts, std::span<model::ActivationSink* const> sinks,
                                     const std::function<void(size_t)>& on_leave = {});
// Mean negative log-likelihood (nats per token) of `continuation` after `prompt`, teacher-forced
// in one forward pass. REQUIRES: both non-empty.
double reference_nll(Forward& fwd, const model::HParams& hp, std::span<const int32_t> prompt,
                     std::span<const int32_t> continuation);

// The k largest values of x[n] with their indices, largest first, lower index first on ties.
void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values);

}  // namespace dayzero::runtime
