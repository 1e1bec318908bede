// The forward pass of a decoder-only model on one backend, for this rank's part of the plan:
// embedding (vocabulary-parallel over tp) on the first stage, the stage's decoder layers
// (heads and FFN split over tp, partial sums all-reduced), final norm and lm_head
// (vocabulary-parallel, logits gathered) on the last stage; hidden states travel between
// stages with send/recv. A KV cache makes prefill and greedy decode one code path; one call
// may carry several sequences (a batch), each with its own cache, as one set of rows.
// With one rank every group is absent and this is the plain single-device forward.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/adapter.h"
#include "backend/backend.h"

namespace dayzero::comm {
class Comm;
}

namespace dayzero::runtime {

// This rank's share of the model and the groups it talks to.
struct Partition {
  int layer_begin = 0, layer_end = -1;  // decoder layers [begin, end); end -1 = all
  bool first_stage = true, last_stage = true;
  int64_t vocab_begin = 0, vocab_end = -1;  // embedding / lm_head rows held; end -1 = all
  comm::Comm* tp = nullptr;  // tensor-parallel group of the stage; null when tp = 1
  comm::Comm* pp = nullptr;  // pipeline group (same dp, same tp index); null when pp = 1
  // The expert group under wide expert parallelism (plan ep_dp > 1): MoE layers dispatch their
  // tokens over it (model::ExpertGroup); null otherwise. reverse_combine: debug.reverse_combine.
  comm::Comm* ep = nullptr;
  bool reverse_combine = false;
};

// The KV cache bytes resident at once on this rank: every cache a Forward makes adds its
// bytes while it lives, so the peak covers whatever coexisted (a decode batch, a reference
// pass). Not thread-safe; one per Forward.
struct KvLedger {
  int64_t resident = 0, peak = 0;
  void add(int64_t b) {
    resident += b;
    peak = std::max(peak, resident);
  }
  void remove(int64_t b) { resident -= b; }
};

// What this rank's layers keep per sequence, as their layer descriptors say (model::LayerCache):
// keys and values [n_ctx, local kv heads, head_dim] where kv_heads > 0, the sparse-attention
// indexer's keys [n_ctx, index_dim] where index_dim > 0, and for a layer with a recurrent state
// (linear attention) its conv window [conv_rows, local heads x conv_per_head] and recurrent
// state [local heads x v_per_head, k_dim, v_dim] (f32), whatever n_ctx is. Heads split over tp
// as model::LayerCache says (plan::local_heads).
// A layer whose adapter makes its own state (model::Adapter::new_layer_state, given as
// make_state) keeps that instead of any of these.
// Move-only; counted in its ledger (if any) until destroyed or released. REQUIRES: the
// ledger outlives the cache.
class KvCache {
 public:
  // layers: the caches of layers [layer_begin, layer_begin + layers.size()); tp: the tp group's size.
  using StateMaker = std::function<std::unique_ptr<model::LayerState>(int layer)>;
  KvCache(backend::Backend& be, int layer_begin, std::span<const model::LayerCache> layers, int tp, int64_t n_ctx,
          KvLedger* ledger = nullptr, const StateMaker& make_state = {});
  KvCache(KvCache&& o) noexcept;
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache() { release(); }

  int64_t n_ctx() const { return n_ctx_; }
  Tensor& k(int layer) { return k_[layer - layer_begin_]; }  // [n_ctx, local kv heads, head_dim]
  Tensor& v(int layer) { return v_[layer - layer_begin_]; }
  // [n_ctx, index_head_dim], or null when the layer keeps no indexer keys.
  Tensor* index_k(int layer) {
    return ik_.empty() || !ik_[layer - layer_begin_].defined() ? nullptr : &ik_[layer - layer_begin_];
  }
  // A linear-attention layer's state, or null for another layer.
  Tensor* conv_state(int layer) { return conv_[layer - layer_begin_].defined() ? &conv_[layer - layer_begin_] : nullptr; }
  Tensor* recurrent_state(int layer) {
    return rec_[layer - layer_begin_].defined() ? &rec_[layer - layer_begin_] : nullptr;
  }
  int64_t* state_pos(int layer) { return &state_pos_[layer - layer_begin_]; }
  // The adapter's own state of the layer, or null.
  model::LayerState* layer_state(int layer) { return states_[layer - layer_begin_].get(); }
  // Bytes of keys and values (and indexer keys), and of the linear-attention and adapter states.
  int64_t kv_bytes() const;
  int64_t state_bytes() const;
  int64_t bytes() const { return kv_bytes() + state_bytes(); }
  // Frees the tensors and leaves the ledger; n_ctx() becomes 0.
  void release();

 private:
  int layer_begin_;
  int64_t n_ctx_;
  std::vector<Tensor> k_, v_, ik_;
  std::vector<Tensor> conv_, rec_;  // [n_layers]; empty tensors outside linear-attention layers
  std::vector<int64_t> state_pos_;
  std::vector<std::unique_ptr<model::LayerState>> states_;  // [n_layers]; null where the adapter keeps none
  KvLedger* ledger_ = nullptr;
};

// One sequence of a batched forward call: its tokens at positions pos0 .. pos0 + n - 1 and its
// cache. REQUIRES: tokens non-empty, pos0 + tokens.size() <= cache->n_ctx().
// images: the sequence's images in prompt order (multimodal families, prefill only); its tokens
// carry each image's feature rows as runs of the placeholder (model::blocks::
// expand_image_placeholders). On the first stage the tower and projector turn each image into
// rows that replace the placeholder rows of the embeddings (dump point merged_embed).
struct SeqInput {
  std::span<const int32_t> tokens;
  int64_t pos0 = 0;
  KvCache* cache = nullptr;
  std::span<const image::ProcessedImage> images = {};
};

class Forward {
 public:
  Forward(backend::Backend& be, const model::Adapter& adapter, const model::HParams& hp, const model::Weights& w,
          Partition part = {});

  const Partition& partition() const { return part_; }
  // A cache for n_ctx positions, counted in this Forward's ledger. REQUIRES: it does not
  // outlive this Forward.
  KvCache new_cache(int64_t n_ctx) const;
  // The most KV cache bytes resident at once among the caches made by new_cache.
  int64_t kv_cache_peak_bytes() const { return kv_ledger_.peak; }

  // Runs tokens at positions pos0 .. pos0 + n - 1 through this rank's part, appending to the
  // cache. On the last stage returns host logits: [n, n_vocab] when all_logits, else [1, n_vocab]
  // for the last token; elsewhere an undefined tensor.
  // Collective over tp and pp: every rank of the replica calls it with the same tokens.
  // REQUIRES: pos0 + tokens.size() <= cache.n_ctx().
  Tensor run(std::span<const int32_t> tokens, int64_t pos0, KvCache& cache, model::ActivationSink* sink,
             bool all_logits, std::span<const image::ProcessedImage> images = {});
  // The same for a batch: the sequences' tokens are stacked in order into one set of rows
  // [sum n_i, n_embd], so every GEMM and every collective runs once for the batch; each
  // sequence appends to and attends over its own cache. The sink sees the stacked rows. On the
  // last stage returns [sum n_i, n_vocab] when all_logits, else [n_seqs, n_vocab] (each
  // sequence's last token, in order).
  // Collective over tp and pp: every rank of the replica calls it with the same batch.
  // REQUIRES: a sequence with images is the batch's only sequence (a prefill), and its tokens
  // hold exactly its images' feature rows as placeholders.
  Tensor run_batch(std::span<const SeqInput> seqs, model::ActivationSink* sink, bool all_logits);

  // Replay (dayzero run --replay-layers): `input`, the hidden state entering layer
  // partition().layer_begin as another run recorded it, through this rank's layers [layer_begin,
  // layer_end) by the same layer loop as run_batch, for one sequence at positions seq.pos0 ..
  // pos0 + n - 1 (the token ids only give n). No embedding, pipeline transfer, final norm or
  // lm_head. Returns the hidden state leaving the last layer, [n, residual width] on the device
  // (model::Adapter::residual_width). Collective over tp. REQUIRES: a partition with neither
  // first nor last stage and no pp group; input on the host, [n, residual width] with
  // n = seq.tokens.size().
  Tensor replay(const Tensor& input, const SeqInput& seq, model::ActivationSink* sink);

  // Counts routed tokens per [layer][expert] of this rank's MoE layers into `counts` (sized
  // [n_layer] here), or stops counting when null.
  void count_expert_tokens(std::vector<std::vector<int64_t>>* counts);

  // debug.perturb (tests only): from now on the dump point `point` is multiplied by scale where
  // it is produced, in every forward pass (perturb_sink.h). Every rank of the replica must set
  // the same perturbation.
  void set_perturbation(std::string point, double scale);

  // The last stage's value on every stage. Collective over pp.
  int32_t share_from_last_stage(int32_t value) const;
  double share_from_last_stage(double value) const;
  // Every element of the last stage's values on every stage, in one broadcast.
  // REQUIRES: the same values.size() on every stage.
  void share_from_last_stage(std::vector<int32_t>& values) const;

 private:
  // The stacked rows of a batch: ids and positions per row, one segment per sequence.
  struct Rows {
    int64_t n = 0;
    Tensor ids_host;                         // [n] int32 on the host
    Tensor positions;                        // [n] int32 on the device
    std::vector<model::SeqSegment> segments;  // [n_seqs]
  };
  Rows stack_rows(std::span<const SeqInput> seqs);
  // This rank's decoder layers over hidden [n, residual width] (in place), each sequence on its cache.
  void run_layers(std::span<const SeqInput> seqs, Rows& rows, model::ActivationSink* sink, Tensor& hidden);
  Tensor lm_head(const Tensor& normed);
  // The images' features into their placeholder rows of hidden [n_tokens, n_embd] (first stage).
  void place_images(const SeqInput& seq, Tensor& hidden, model::ActivationSink* sink);

  backend::Backend& be_;
  const model::Adapter& adapter_;
  const model::HParams& hp_;
  const model::Weights& w_;
  Partition part_;
  Tensor inv_freq_;  // [head_dim / 2] on the device
  std::function<void(Tensor&)> tp_all_reduce_;
  std::optional<model::ExpertGroup> expert_group_;  // part_.ep set
  std::vector<std::vector<int64_t>>* expert_tokens_ = nullptr;
  std::string perturb_point_;  // empty: no perturbation
  double perturb_scale_ = 1.0;
  std::vector<model::LayerCache> caches_;  // [n_layer]: the adapter's layer descriptors' caches
  mutable KvLedger kv_ledger_;
};

}  // namespace dayzero::runtime
