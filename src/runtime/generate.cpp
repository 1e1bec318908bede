// Prefill + batched greedy decode, and reference NLL.
#include "runtime/generate.h"

#include <algorithm>
#include <numeric>

#include "core/clock.h"
#include "kernels/ops.h"
#include "runtime/batch_sink.h"

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
                 model::ActivationSink* sink, std::span<const image::ProcessedImage> images) {
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  Sequence seq{fwd.new_cache(n_prompt + std::max(opts.max_new_tokens, 1)), {}, n_prompt, {}};
  const int64_t t0 = monotonic_ns();
  seq.logits = fwd.run(prompt, 0, seq.cache, sink, false, images);
  seq.gen.prefill_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  if (fwd.partition().last_stage) seq.gen.logits_last.assign(seq.logits.f32(), seq.logits.f32() + hp.n_vocab);
  return seq;
}

std::vector<Generation> decode_batch(Forward& fwd, const model::HParams& hp, std::vector<Sequence>&& seqs,
                                     const GenerateOptions& opts, std::span<model::ActivationSink* const> sinks,
                                     const std::function<void(size_t)>& on_leave) {
  DZ_CHECK(sinks.empty() || sinks.size() == seqs.size(), sinks.size() << " sinks for " << seqs.size() << " sequences");
  const size_t n_seq = seqs.size();
  std::vector<Generation> gens(n_seq);
  const int k = static_cast<int>(std::min<int64_t>(opts.top_k, hp.n_vocab));
  const bool last = fwd.partition().last_stage;  // only the last stage has logits
  std::vector<size_t> live(n_seq);  // indices into seqs, in batch row order
  std::iota(live.begin(), live.end(), size_t{0});
  std::vector<Tensor> logits(n_seq);  // [1, n_vocab] per live sequence on the last stage
  for (size_t i = 0; i < n_seq; ++i) {
    gens[i] = std::move(seqs[i].gen);
    logits[i] = std::move(seqs[i].logits);
  }
  std::vector<int32_t> tokens;
  for (int step = 0; step < opts.max_new_tokens && !live.empty(); ++step) {
    const int64_t t0 = monotonic_ns();
    tokens.assign(live.size(), -1);
    if (last) {
      for (size_t j = 0; j < live.size(); ++j) {
        Generation& g = gens[live[j]];
        const float* row = logits[live[j]].f32();
        tokens[j] = opts.pick ? opts.pick(live[j], row) : static_cast<int32_t>(kernels::cpu::argmax(hp.n_vocab, row));
        if (k > 0) {
          const size_t at = g.step_topk_ids.size();
          g.step_topk_ids.resize(at + k);
          g.step_topk_logits.resize(at + k);
          top_k(row, hp.n_vocab, k, g.step_topk_ids.data() + at, g.step_topk_logits.data() + at);
        }
      }
    }
    fwd.share_from_last_stage(tokens);  // one broadcast for the whole batch
    const std::vector<char> ended = opts.step_end ? opts.step_end(live, tokens) : std::vector<char>{};
    DZ_CHECK(ended.empty() || ended.size() == live.size(), "step_end answered for " << ended.size() << " of " << live.size() << " sequences");
    // Who stays: not stopped at EOS and not at its last token (which needs no forward pass).
    std::vector<size_t> next_live;
    std::vector<int32_t> next_tokens;
    for (size_t j = 0; j < live.size(); ++j) {
      Generation& g = gens[live[j]];
      g.generated_ids.push_back(tokens[j]);
      const bool eos = std::find(opts.eos_ids.begin(), opts.eos_ids.end(), tokens[j]) != opts.eos_ids.end();
      if (eos && opts.stop_at_eos) g.stopped_at_eos = true;
      if ((eos && opts.stop_at_eos) || step + 1 == opts.max_new_tokens || (!ended.empty() && ended[j])) {
        seqs[live[j]].cache.release();
        if (on_leave) on_leave(live[j]);
        continue;
      }
      next_live.push_back(live[j]);
      next_tokens.push_back(tokens[j]);
    }
    if (!next_live.empty()) {
      std::vector<SeqInput> batch;
      std::vector<BatchSink::Part> parts;
      batch.reserve(next_live.size());
      for (size_t j = 0; j < next_live.size(); ++j) {
        Sequence& sq = seqs[next_live[j]];
        batch.push_back({std::span<const int32_t>(&next_tokens[j], 1), sq.pos, &sq.cache});
        parts.push_back({static_cast<int64_t>(j), 1, sinks.empty() ? nullptr : sinks[next_live[j]]});
      }
      BatchSink sink(std::move(parts));
      const Tensor out = fwd.run_batch(batch, sink.any() ? &sink : nullptr, false);  // [n_live, n_vocab]
      for (size_t j = 0; j < next_live.size(); ++j) {
        Sequence& sq = seqs[next_live[j]];
        ++sq.pos;
        ++gens[next_live[j]].decode_tokens;
        if (last) logits[next_live[j]] = out.rows(static_cast<int64_t>(j), static_cast<int64_t>(j) + 1);
      }
    }
    const double share = static_cast<double>(monotonic_ns() - t0) * 1e-9 / static_cast<double>(live.size());
    for (size_t i : live) gens[i].decode_seconds += share;
    live = std::move(next_live);
  }
  if (on_leave)  // max_new_tokens 0: nobody took a step
    for (size_t i : live) on_leave(i);
  for (Sequence& sq : seqs) sq.cache.release();
  return gens;
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
