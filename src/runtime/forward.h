// The forward pass of a decoder-only model on one backend: embedding, the adapter's layers,
// final norm and logits, with a KV cache so prefill and greedy decode share one code path.
// Not a scheduler: prompts are run one at a time by the runner.
#pragma once

#include <span>
#include <vector>

#include "model/adapter.h"
#include "runtime/backend.h"

namespace dayzero::runtime {

// Keys and values of every layer for one sequence, on the backend's device.
class KvCache {
 public:
  KvCache(Backend& be, const model::HParams& hp, int64_t n_ctx);
  int64_t n_ctx() const { return n_ctx_; }
  Tensor& k(int layer) { return k_[layer]; }  // [n_ctx, n_head_kv, head_dim]
  Tensor& v(int layer) { return v_[layer]; }
  int64_t bytes() const;

 private:
  int64_t n_ctx_;
  std::vector<Tensor> k_, v_;
};

class Forward {
 public:
  Forward(Backend& be, const model::Adapter& adapter, const model::HParams& hp, const model::Weights& w);

  // Runs tokens at positions pos0 .. pos0 + n - 1 through the model, appending to the cache.
  // Returns host logits: [n, n_vocab] when all_logits, else [1, n_vocab] for the last token.
  // REQUIRES: pos0 + tokens.size() <= cache.n_ctx().
  Tensor run(std::span<const int32_t> tokens, int64_t pos0, KvCache& cache, model::ActivationSink* sink,
             bool all_logits);

 private:
  Backend& be_;
  const model::Adapter& adapter_;
  const model::HParams& hp_;
  const model::Weights& w_;
  Tensor inv_freq_;  // [head_dim / 2] on the device
};

}  // namespace dayzero::runtime
