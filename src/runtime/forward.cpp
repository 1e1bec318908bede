// Forward pass: embed -> layers -> final norm -> lm_head.
#include "runtime/forward.h"

#include <cstring>

namespace dayzero::runtime {

KvCache::KvCache(Backend& be, const model::HParams& hp, int64_t n_ctx) : n_ctx_(n_ctx) {
  for (int l = 0; l < hp.n_layer; ++l) {
    k_.push_back(be.empty(DType::kF32, {n_ctx, hp.n_head_kv, hp.head_dim}));
    v_.push_back(be.empty(DType::kF32, {n_ctx, hp.n_head_kv, hp.head_dim}));
  }
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const auto& t : k_) b += static_cast<int64_t>(t.bytes()) * 2;
  return b;
}

Forward::Forward(Backend& be, const model::Adapter& adapter, const model::HParams& hp, const model::Weights& w)
    : be_(be), adapter_(adapter), hp_(hp), w_(w) {
  const std::vector<float> inv = model::rope_inv_freq(hp);
  Tensor host = Tensor::host(DType::kF32, {static_cast<int64_t>(inv.size())});
  std::memcpy(host.f32(), inv.data(), inv.size() * sizeof(float));
  inv_freq_ = be.to_device(host);
}

Tensor Forward::run(std::span<const int32_t> tokens, int64_t pos0, KvCache& cache, model::ActivationSink* sink,
                    bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  DZ_CHECK(n > 0 && pos0 + n <= cache.n_ctx(), "forward of " << n << " tokens at " << pos0 << " exceeds the cache");
  Tensor ids_host = Tensor::host(DType::kI32, {n});
  Tensor pos_host = Tensor::host(DType::kI32, {n});
  for (int64_t i = 0; i < n; ++i) {
    static_cast<int32_t*>(ids_host.data())[i] = tokens[i];
    static_cast<int32_t*>(pos_host.data())[i] = static_cast<int32_t>(pos0 + i);
  }
  const Tensor ids = be_.to_device(ids_host);
  const Tensor positions = be_.to_device(pos_host);

  Tensor hidden = be_.empty(DType::kF32, {n, hp_.n_embd});
  be_.embedding(ids, w_.get(adapter_.embed_name()), hidden);
  model::emit(sink, "embed", hidden);

  for (int l = 0; l < hp_.n_layer; ++l) {
    model::LayerContext ctx{be_, hp_, w_, cache.k(l), cache.v(l), pos0, positions, inv_freq_, sink};
    adapter_.forward_layer(ctx, l, hidden);
  }

  Tensor normed = be_.empty(DType::kF32, {n, hp_.n_embd});
  be_.rmsnorm(hidden, w_.get(adapter_.final_norm_name()), static_cast<float>(hp_.rms_eps), normed);
  model::emit(sink, "final_norm", normed);

  const Tensor rows = all_logits ? normed : normed.rows(n - 1, n);
  Tensor logits = be_.empty(DType::kF32, {rows.dim(0), hp_.n_vocab});
  be_.matmul(rows, w_.get(adapter_.lm_head_name(hp_)), logits);
  model::emit(sink, "logits", logits);
  Tensor host = Tensor::host(DType::kF32, logits.shape());
  be_.to_host(logits, host);
  return host;
}

}  // namespace dayzero::runtime
