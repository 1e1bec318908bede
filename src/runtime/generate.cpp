// Prefill + greedy decode, and reference NLL.
#include "runtime/generate.h"

#include <algorithm>
#include <numeric>

#include "core/clock.h"
#include "kernels/ops.h"

namespace dayzero::runtime {

void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  for (int i = 0; i < k; ++i) {
    ids[i] = idx[i];
    values[i] = x[idx[i]];
  }
}

Sequence prefill(Forward& fwd, const model::HParams& hp, std::span<const int32_t> prompt, const GenerateOptions& opts,
                 model::ActivationSink* sink) {
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  Sequence seq{fwd.new_cache(n_prompt + std::max(opts.max_new_tokens, 1)), {}, n_prompt, {}};
  const int64_t t0 = monotonic_ns();
  seq.logits = fwd.run(prompt, 0, seq.cache, sink, false);
  seq.gen.prefill_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  if (fwd.partition().last_stage) seq.gen.logits_last.assign(seq.logits.f32(), seq.logits.f32() + hp.n_vocab);
  return seq;
}

Generation decode(Forward& fwd, const model::HParams& hp, Sequence&& seq, const GenerateOptions& opts,
                  model::ActivationSink* sink) {
  Generation g = std::move(seq.gen);
  const int k = static_cast<int>(std::min<int64_t>(opts.top_k, hp.n_vocab));
  const bool last = fwd.partition().last_stage;  // only the last stage has logits
  const int64_t t0 = monotonic_ns();
  Tensor logits = std::move(seq.logits);
  int64_t pos = seq.pos;
  for (int step = 0; step < opts.max_new_tokens; ++step) {
    int32_t token = -1;
    if (last) {
      const float* row = logits.f32();
      token = static_cast<int32_t>(kernels::cpu::argmax(hp.n_vocab, row));
      if (k > 0) {
        g.step_topk_ids.resize(g.step_topk_ids.size() + k);
        g.step_topk_logits.resize(g.step_topk_logits.size() + k);
        top_k(row, hp.n_vocab, k, g.step_topk_ids.data() + step * k, g.step_topk_logits.data() + step * k);
      }
    }
    token = fwd.share_from_last_stage(token);
    g.generated_ids.push_back(token);
    const bool eos = std::find(opts.eos_ids.begin(), opts.eos_ids.end(), token) != opts.eos_ids.end();
    if (eos && opts.stop_at_eos) {
      g.stopped_at_eos = true;
      break;
    }
    if (step + 1 == opts.max_new_tokens) break;  // the last token needs no forward pass
    const int32_t next[1] = {token};
    logits = fwd.run(next, pos, seq.cache, sink, false);
    ++pos;
    ++g.decode_tokens;
  }
  g.decode_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  return g;
}

double reference_nll(Forward& fwd, const model::HParams& hp, std::span<const int32_t> prompt,
                     std::span<const int32_t> continuation) {
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), continuation.begin(), continuation.end());
  KvCache cache = fwd.new_cache(static_cast<int64_t>(all.size()));
  const Tensor logits = fwd.run(all, 0, cache, nullptr, true);  // [n, n_vocab] on the last stage
  double nll = 0;
  if (fwd.partition().last_stage) {
    for (size_t j = 0; j < continuation.size(); ++j) {
      const float* row = logits.f32() + (prompt.size() - 1 + j) * hp.n_vocab;
      nll -= kernels::cpu::log_softmax_at(hp.n_vocab, row, continuation[j]);
    }
    nll /= static_cast<double>(continuation.size());
  }
  return fwd.share_from_last_stage(nll);
}

}  // namespace dayzero::runtime
