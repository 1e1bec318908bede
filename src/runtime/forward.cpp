// Forward pass: [recv | embed] -> this stage's layers -> [send | final norm -> lm_head]; a replay
// enters the same layer loop with a recorded hidden state.
#include "runtime/forward.h"
#include "runtime/perturb_sink.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "comm/comm.h"
#include "model/blocks/norm.h"
#include "model/blocks/vision.h"
#include "plan/memory.h"

namespace dayzero::runtime {
namespace {
constexpr int kHiddenTag = 11;

void check_comm(const Status& s, const char* what) { DZ_CHECK(s.ok(), what << ": " << s.message()); }

// The vision points of a prompt's images stacked in image order: every image produces the same
// names, and each name is dumped once as [rows of all images, width].
class StackingSink final : public model::ActivationSink {
 public:
  StackingSink(backend::Backend& be, model::ActivationSink* sink) : be_(be), sink_(sink) {}
  bool wants(const std::string& name) const override { return sink_ && sink_->wants(name); }
  void put(const std::string& name, const Tensor& t) override {
    const int64_t width = t.dim(-1);
    Tensor host = Tensor::host(DType::kF32, {t.numel() / width, width});
    be_.to_host(t, host);
    auto [it, added] = stacked_.try_emplace(name, width, std::vector<float>{});
    if (added) order_.push_back(name);
    DZ_CHECK(it->second.first == width, name << ": width " << width << " after " << it->second.first);
    it->second.second.insert(it->second.second.end(), host.f32(), host.f32() + host.numel());
  }
  // Hands every stacked point to the sink, in the order first produced.
  void flush() {
    for (const std::string& name : order_) {
      const auto& [width, values] = stacked_.at(name);
      Tensor t = Tensor::host(DType::kF32, {static_cast<int64_t>(values.size()) / width, width});
      std::copy(values.begin(), values.end(), t.f32());
      sink_->put(name, be_.to_device(t));
    }
  }

 private:
  backend::Backend& be_;
  model::ActivationSink* sink_;
  std::map<std::string, std::pair<int64_t, std::vector<float>>> stacked_;
  std::vector<std::string> order_;
};
}  // namespace

KvCache::KvCache(backend::Backend& be, int layer_begin, std::span<const model::LayerCache> layers, int tp,
                 int64_t n_ctx, KvLedger* ledger, const StateMaker& make_state)
    : layer_begin_(layer_begin), n_ctx_(n_ctx), ledger_(ledger) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const model::LayerCache& c = layers[i];
    states_.push_back(make_state ? make_state(layer_begin + static_cast<int>(i)) : nullptr);
    if (states_.back()) {  // the adapter's own state replaces keys, values and recurrent state
      k_.emplace_back();
      v_.emplace_back();
      ik_.emplace_back();
      conv_.emplace_back();
      rec_.emplace_back();
      continue;
    }
    auto grows = [&](int64_t heads, int64_t dim) {
      return heads > 0 && dim > 0 ? be.empty(DType::kF32, {n_ctx, heads, dim}) : Tensor();
    };
    const int64_t kv_heads = plan::local_heads(c.kv_heads, tp);
    k_.push_back(grows(kv_heads, c.head_dim));
    v_.push_back(grows(kv_heads, c.head_dim));
    ik_.push_back(c.index_dim > 0 ? be.empty(DType::kF32, {n_ctx, c.index_dim}) : Tensor());
    if (c.has_state()) {
      // A fixed-size state instead of keys and values: nothing grows with n_ctx.
      DZ_CHECK(c.state_heads % tp == 0, c.state_heads << " recurrent-state head groups over tp=" << tp);
      const int64_t heads = c.state_heads / tp;
      conv_.push_back(be.empty(DType::kF32, {c.conv_rows, heads * c.conv_per_head}));
      rec_.push_back(be.empty(DType::kF32, {heads * c.v_per_head, c.k_dim, c.v_dim}));
    } else {
      conv_.emplace_back();
      rec_.emplace_back();
    }
  }
  state_pos_.assign(layers.size(), 0);
  if (ledger_) ledger_->add(bytes());
}

KvCache::KvCache(KvCache&& o) noexcept
    : layer_begin_(o.layer_begin_),
      n_ctx_(o.n_ctx_),
      k_(std::move(o.k_)),
      v_(std::move(o.v_)),
      ik_(std::move(o.ik_)),
      conv_(std::move(o.conv_)),
      rec_(std::move(o.rec_)),
      state_pos_(std::move(o.state_pos_)),
      states_(std::move(o.states_)),
      ledger_(o.ledger_) {
  o.k_.clear();
  o.v_.clear();
  o.ik_.clear();
  o.conv_.clear();
  o.rec_.clear();
  o.state_pos_.clear();
  o.states_.clear();
  o.n_ctx_ = 0;
  o.ledger_ = nullptr;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    release();
    layer_begin_ = o.layer_begin_;
    n_ctx_ = o.n_ctx_;
    k_ = std::move(o.k_);
    v_ = std::move(o.v_);
    ik_ = std::move(o.ik_);
    conv_ = std::move(o.conv_);
    rec_ = std::move(o.rec_);
    state_pos_ = std::move(o.state_pos_);
    states_ = std::move(o.states_);
    ledger_ = o.ledger_;
    o.k_.clear();
    o.v_.clear();
    o.ik_.clear();
    o.conv_.clear();
    o.rec_.clear();
    o.state_pos_.clear();
    o.states_.clear();
    o.n_ctx_ = 0;
    o.ledger_ = nullptr;
  }
  return *this;
}

void KvCache::release() {
  if (ledger_) ledger_->remove(bytes());
  ledger_ = nullptr;
  k_.clear();
  v_.clear();
  ik_.clear();
  conv_.clear();
  rec_.clear();
  state_pos_.clear();
  states_.clear();
  n_ctx_ = 0;
}

int64_t KvCache::kv_bytes() const {
  int64_t b = 0;
  for (const auto& t : k_)
    if (t.defined()) b += static_cast<int64_t>(t.bytes()) * 2;  // k and v
  for (const auto& t : ik_)
    if (t.defined()) b += static_cast<int64_t>(t.bytes());
  return b;
}

int64_t KvCache::state_bytes() const {
  int64_t b = 0;
  for (const auto& t : conv_)
    if (t.defined()) b += static_cast<int64_t>(t.bytes());
  for (const auto& t : rec_)
    if (t.defined()) b += static_cast<int64_t>(t.bytes());
  for (const auto& s : states_)
    if (s) b += s->bytes();
  return b;
}

Forward::Forward(backend::Backend& be, const model::Adapter& adapter, const model::HParams& hp, const model::Weights& w,
                 Partition part)
    : be_(be), adapter_(adapter), hp_(hp), w_(w), part_(part) {
  if (part_.layer_end < 0) part_.layer_end = static_cast<int>(hp.n_layer);
  if (part_.vocab_end < 0) part_.vocab_end = hp.n_vocab;
  for (const model::LayerDesc& d : adapter.layer_kinds(hp)) caches_.push_back(d.cache);
  DZ_CHECK(static_cast<int>(caches_.size()) >= part_.layer_end,
           caches_.size() << " layer descriptors for layers up to " << part_.layer_end);
  const std::vector<float> inv = model::rope_inv_freq(hp);
  Tensor host = Tensor::host(DType::kF32, {static_cast<int64_t>(inv.size())});
  std::memcpy(host.f32(), inv.data(), inv.size() * sizeof(float));
  inv_freq_ = be.to_device(host);
  if (part_.tp) {
    comm::Comm* tp = part_.tp;
    tp_all_reduce_ = [tp](Tensor& t) { check_comm(tp->all_reduce_sum(t), "tensor-parallel all-reduce"); };
  }
  if (part_.ep) {
    comm::Comm* ep = part_.ep;
    model::ExpertGroup& g = expert_group_.emplace();
    g.rank = ep->rank();
    g.size = ep->size();
    g.reverse_combine = part_.reverse_combine;
    g.all_to_all = [ep](const Tensor& in, std::span<const int64_t> send, Tensor& out, std::span<const int64_t> recv,
                        const char* op) {
      check_comm(ep->all_to_allv(in, send, out, recv, op), op);
    };
    g.all_gather = [ep](const Tensor& in, Tensor& out) {
      check_comm(ep->all_gather(in, out), "expert-parallel all-gather");
    };
  }
}

KvCache Forward::new_cache(int64_t n_ctx) const {
  const std::span<const model::LayerCache> mine(caches_.data() + part_.layer_begin,
                                                static_cast<size_t>(part_.layer_end - part_.layer_begin));
  const int tp = part_.tp ? part_.tp->size() : 1;
  const KvCache::StateMaker make_state = [&](int layer) { return adapter_.new_layer_state(hp_, layer, n_ctx, tp); };
  return KvCache(be_, part_.layer_begin, mine, tp, n_ctx, &kv_ledger_, make_state);
}

Tensor Forward::run(std::span<const int32_t> tokens, int64_t pos0, KvCache& cache, model::ActivationSink* sink,
                    bool all_logits, std::span<const image::ProcessedImage> images) {
  const SeqInput one{tokens, pos0, &cache, images};
  return run_batch({&one, 1}, sink, all_logits);
}

void Forward::set_perturbation(std::string point, double scale) {
  perturb_point_ = std::move(point);
  perturb_scale_ = scale;
}

Forward::Rows Forward::stack_rows(std::span<const SeqInput> seqs) {
  DZ_CHECK(!seqs.empty(), "forward of an empty batch");
  int64_t n = 0;
  for (const SeqInput& s : seqs) {
    const auto len = static_cast<int64_t>(s.tokens.size());
    DZ_CHECK(len > 0 && s.pos0 + len <= s.cache->n_ctx(),
             "forward of " << len << " tokens at " << s.pos0 << " exceeds the cache");
    n += len;
    DZ_CHECK(s.images.empty() || seqs.size() == 1, "images in a batch of " << seqs.size() << " sequences");
    DZ_CHECK(s.images.empty() || hp_.vision.enabled, hp_.family << " takes no images");
  }
  // Stacked rows: ids and per-row positions; one segment per sequence.
  Tensor pos_host = Tensor::host(DType::kI32, {n});
  Tensor ids_host = Tensor::host(DType::kI32, {n});
  auto* pos_p = static_cast<int32_t*>(pos_host.data());
  auto* ids_p = static_cast<int32_t*>(ids_host.data());
  std::vector<model::SeqSegment> segments(seqs.size());
  int64_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto len = static_cast<int64_t>(seqs[i].tokens.size());
    for (int64_t t = 0; t < len; ++t) {
      pos_p[row + t] = static_cast<int32_t>(seqs[i].pos0 + t);
      ids_p[row + t] = seqs[i].tokens[static_cast<size_t>(t)];
    }
    segments[i].pos0 = seqs[i].pos0;
    segments[i].row0 = row;
    segments[i].n_rows = len;
    row += len;
  }
  return {n, std::move(ids_host), be_.to_device(pos_host), std::move(segments)};
}

void Forward::run_layers(std::span<const SeqInput> seqs, Rows& rows, model::ActivationSink* sink, Tensor& hidden) {
  std::vector<std::vector<int32_t>> dsa_keys;  // the last DSA indexer's selection, per row
  for (int l = part_.layer_begin; l < part_.layer_end; ++l) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      rows.segments[i].layer_state = seqs[i].cache->layer_state(l);
      rows.segments[i].k_cache = &seqs[i].cache->k(l);
      rows.segments[i].v_cache = &seqs[i].cache->v(l);
      rows.segments[i].index_k_cache = seqs[i].cache->index_k(l);
      rows.segments[i].conv_state = seqs[i].cache->conv_state(l);
      rows.segments[i].recurrent_state = seqs[i].cache->recurrent_state(l);
      rows.segments[i].state_pos = seqs[i].cache->state_pos(l);
    }
    model::LayerContext ctx{be_,        hp_,      w_,   rows.segments, rows.positions, rows.ids_host,
                            inv_freq_,  sink,     tp_all_reduce_ ? &tp_all_reduce_ : nullptr, expert_tokens_,
                            &dsa_keys};
    if (part_.tp) ctx.tp_rank = part_.tp->rank(), ctx.tp_size = part_.tp->size();
    if (expert_group_) ctx.expert_group = &*expert_group_;
    adapter_.forward_layer(ctx, l, hidden);
  }
}

Tensor Forward::replay(const Tensor& input, const SeqInput& seq, model::ActivationSink* sink) {
  DZ_CHECK(!part_.first_stage && !part_.last_stage && part_.pp == nullptr,
           "replay needs a partition of decoder layers only (no embedding, lm_head or pipeline)");
  DZ_CHECK(input.shape() == (std::vector<int64_t>{static_cast<int64_t>(seq.tokens.size()), adapter_.residual_width(hp_)}),
           "replay input " << shape_str(input.shape()) << " for " << seq.tokens.size() << " tokens");
  PerturbSink perturb(be_, perturb_point_, perturb_scale_, sink);
  if (!perturb_point_.empty()) sink = &perturb;
  Rows rows = stack_rows({&seq, 1});
  Tensor hidden = be_.to_device(input);
  run_layers({&seq, 1}, rows, sink, hidden);
  return hidden;
}

Tensor Forward::run_batch(std::span<const SeqInput> seqs, model::ActivationSink* sink, bool all_logits) {
  PerturbSink perturb(be_, perturb_point_, perturb_scale_, sink);
  if (!perturb_point_.empty()) sink = &perturb;
  Rows rows = stack_rows(seqs);
  const int64_t n = rows.n;
  const std::vector<model::SeqSegment>& segments = rows.segments;

  const int64_t width = adapter_.residual_width(hp_);
  Tensor hidden = be_.empty_output(DType::kF32, {n, width});  // embedded or received in full
  if (part_.first_stage) {
    Tensor embedded = width == hp_.n_embd ? hidden : be_.empty_output(DType::kF32, {n, hp_.n_embd});
    be_.embedding(be_.to_device(rows.ids_host), w_.get(adapter_.embed_name()), part_.vocab_begin, embedded);
    // Vocabulary-parallel: each tp rank filled the rows of its vocabulary range.
    if (part_.vocab_end - part_.vocab_begin < hp_.n_vocab && tp_all_reduce_) tp_all_reduce_(embedded);
    model::emit(sink, "embed", embedded);
    if (!seqs[0].images.empty()) place_images(seqs[0], embedded, sink);
    if (width != hp_.n_embd) adapter_.enter_residual(be_, hp_, w_, embedded, hidden);
  } else {
    const int prev = part_.pp->rank() - 1;
    check_comm(part_.pp->recv(hidden, prev, kHiddenTag), "pipeline receive of hidden states");
  }

  run_layers(seqs, rows, sink, hidden);

  if (!part_.last_stage) {
    check_comm(part_.pp->send(hidden, part_.pp->rank() + 1, kHiddenTag), "pipeline send of hidden states");
    return {};
  }
  Tensor normed = be_.empty_output(DType::kF32, {n, hp_.n_embd});
  if (width != hp_.n_embd) {
    Tensor collapsed = be_.empty_output(DType::kF32, {n, hp_.n_embd});
    adapter_.leave_residual(be_, hp_, w_, hidden, collapsed, sink);
    model::blocks::rms_norm(be_, hp_, collapsed, w_.get(adapter_.final_norm_name()), normed);
  } else {
    model::blocks::rms_norm(be_, hp_, hidden, w_.get(adapter_.final_norm_name()), normed);
  }
  model::emit(sink, "final_norm", normed);
  Tensor last_rows;  // [n_seqs, n_embd]: each sequence's last row
  if (all_logits || n == static_cast<int64_t>(seqs.size())) {
    last_rows = normed;
  } else if (seqs.size() == 1) {
    last_rows = normed.rows(n - 1, n);
  } else {
    last_rows = be_.empty(DType::kF32, {static_cast<int64_t>(seqs.size()), hp_.n_embd});
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t end = segments[i].row0 + segments[i].n_rows;
      Tensor dst = last_rows.rows(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
      be_.copy(normed.rows(end - 1, end), dst);
    }
  }
  Tensor logits = lm_head(last_rows);
  model::emit(sink, "logits", logits);
  return logits;
}

void Forward::place_images(const SeqInput& seq, Tensor& hidden, model::ActivationSink* sink) {
  // Every tp rank holds the whole tower (replicated) and computes the same features: no
  // collective, and the result is the same under every plan.
  std::vector<Tensor> features;
  StackingSink stacked(be_, sink);
  for (const image::ProcessedImage& img : seq.images)
    features.push_back(adapter_.image_features(be_, hp_, w_, img, sink ? &stacked : nullptr));
  if (sink) stacked.flush();
  const Status s = model::blocks::place_image_features(be_, seq.tokens, hp_.vision.image_token_id, features, hidden);
  DZ_CHECK(s.ok(), s.message());
  model::emit(sink, "merged_embed", hidden);
}

Tensor Forward::lm_head(const Tensor& rows) {
  const int64_t m = rows.dim(0);
  const Tensor& w = w_.get(adapter_.lm_head_name(hp_));
  const int64_t v_local = w.dim(0);
  Tensor local = be_.empty_output(DType::kF32, {m, v_local});
  be_.matmul(rows, w, local);
  Tensor host_local = Tensor::host(DType::kF32, {m, v_local});
  be_.to_host(local, host_local);
  if (v_local == hp_.n_vocab) return host_local;
  // Vocabulary-parallel lm_head: gather every rank's columns (padded to the largest share).
  comm::Comm* tp = part_.tp;
  DZ_CHECK(tp != nullptr, "lm_head holds " << v_local << " of " << hp_.n_vocab << " rows without a tp group");
  const int64_t share = (hp_.n_vocab + tp->size() - 1) / tp->size();
  Tensor padded = Tensor::host(DType::kF32, {m, share});
  for (int64_t r = 0; r < m; ++r)
    std::memcpy(padded.f32() + r * share, host_local.f32() + r * v_local, static_cast<size_t>(v_local) * 4);
  Tensor gathered = Tensor::host(DType::kF32, {tp->size() * m, share});
  check_comm(tp->all_gather(padded, gathered), "tensor-parallel gather of logits");
  Tensor logits = Tensor::host(DType::kF32, {m, hp_.n_vocab});
  for (int t = 0; t < tp->size(); ++t) {
    const int64_t v0 = t * share, width = std::min(share, hp_.n_vocab - v0);
    for (int64_t r = 0; r < m && width > 0; ++r)
      std::memcpy(logits.f32() + r * hp_.n_vocab + v0, gathered.f32() + (t * m + r) * share,
                  static_cast<size_t>(width) * 4);
  }
  return logits;
}

void Forward::count_expert_tokens(std::vector<std::vector<int64_t>>* counts) {
  expert_tokens_ = counts;
  if (counts) counts->resize(static_cast<size_t>(hp_.n_layer));
}

int32_t Forward::share_from_last_stage(int32_t value) const {
  if (!part_.pp) return value;
  Tensor t = Tensor::host(DType::kI32, {1});
  static_cast<int32_t*>(t.data())[0] = value;
  check_comm(part_.pp->broadcast(t, part_.pp->size() - 1), "pipeline broadcast of the next token");
  return static_cast<int32_t*>(t.data())[0];
}

void Forward::share_from_last_stage(std::vector<int32_t>& values) const {
  if (!part_.pp || values.empty()) return;
  Tensor t = Tensor::host(DType::kI32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  check_comm(part_.pp->broadcast(t, part_.pp->size() - 1), "pipeline broadcast of the next tokens");
  std::memcpy(values.data(), t.data(), values.size() * sizeof(int32_t));
}

double Forward::share_from_last_stage(double value) const {
  if (!part_.pp) return value;
  Tensor t = Tensor::host(DType::kF32, {2});
  // A double travels as two floats' worth of bytes.
  std::memcpy(t.data(), &value, sizeof value);
  check_comm(part_.pp->broadcast(t, part_.pp->size() - 1), "pipeline broadcast");
  std::memcpy(&value, t.data(), sizeof value);
  return value;
}

}  // namespace dayzero::runtime
