// Wide expert parallelism: dispatch this rank's tokens to their experts' owners, run the local
// experts on what arrived, combine the results back in token order, gather every rank's rows.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "model/blocks/moe.h"

namespace dayzero::model::blocks {

Tensor moe_dispatched(LayerContext& ctx, int layer, const MoeNames& names, const Tensor& x, const Routing& r) {
  backend::Backend& be = ctx.be;
  const ExpertGroup& g = *ctx.expert_group;
  const int64_t n = x.dim(0), d = ctx.hp.n_embd, ne = ctx.hp.n_expert, k = ctx.hp.n_expert_used;
  const int size = g.size, me = g.rank;
  DZ_CHECK(ne % size == 0, ne << " experts over an expert group of " << size);
  const int64_t per = ne / size;
  const int64_t lo = me * n / size, hi = (me + 1) * n / size;
  Tensor x_host = Tensor::host(DType::kF32, {n, d});
  be.to_host(x, x_host);

  // Dispatch: (token, slot) pairs of this rank's rows by destination, then token, then slot.
  // Each row carries its expert id in an extra column (exact in f32 below 2^24 experts).
  std::vector<std::vector<int64_t>> to(static_cast<size_t>(size));  // slot indices t * k + j
  for (int64_t t = lo; t < hi; ++t)
    for (int64_t j = 0; j < k; ++j) to[static_cast<size_t>(r.ids[t * k + j] / per)].push_back(t * k + j);
  std::vector<int64_t> send_rows(size), recv_rows(size), at(static_cast<size_t>((hi - lo) * k));
  int64_t sent = 0;
  for (int s = 0; s < size; ++s) send_rows[s] = static_cast<int64_t>(to[s].size()), sent += send_rows[s];
  Tensor counts = Tensor::host(DType::kI32, {1, size}), all_counts = Tensor::host(DType::kI32, {size, size});
  auto* c = static_cast<int32_t*>(counts.data());
  for (int s = 0; s < size; ++s) c[s] = static_cast<int32_t>(send_rows[s]);
  g.all_gather(counts, all_counts);
  const auto* all = static_cast<const int32_t*>(all_counts.data());
  int64_t received = 0;
  for (int s = 0; s < size; ++s) recv_rows[s] = all[s * size + me], received += recv_rows[s];

  const int64_t w = d + 1;
  Tensor out_rows = Tensor::host(DType::kF32, {sent, w});
  int64_t row = 0;
  for (int s = 0; s < size; ++s)
    for (int64_t slot : to[s]) {
      const int64_t t = slot / k;
      std::memcpy(out_rows.f32() + row * w, x_host.f32() + t * d, static_cast<size_t>(d) * 4);
      out_rows.f32()[row * w + d] = static_cast<float>(r.ids[slot]);
      at[static_cast<size_t>(slot - lo * k)] = row++;
    }
  Tensor in_rows = Tensor::host(DType::kF32, {received, w});
  g.all_to_all(out_rows, send_rows, in_rows, recv_rows, "dispatch");

  // The local experts on the rows that arrived, in expert order.
  Tensor results = Tensor::host(DType::kF32, {received, d});
  for (int64_t e = me * per; e < (me + 1) * per; ++e) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < received; ++i)
      if (static_cast<int64_t>(in_rows.f32()[i * w + d]) == e) rows.push_back(i);
    if (rows.empty()) continue;
    const Tensor* gate_w = ctx.w.find(expert_tensor_name(names.expert_gate, layer, static_cast<int>(e)));
    DZ_CHECK(gate_w, "expert " << e << " of layer " << layer << " is not loaded on expert rank " << me);
    const auto m = static_cast<int64_t>(rows.size());
    Tensor xe = Tensor::host(DType::kF32, {m, d});
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(xe.f32() + i * d, in_rows.f32() + rows[i] * w, static_cast<size_t>(d) * 4);
    const Tensor ye = run_expert(ctx, layer, static_cast<int>(e), names, *gate_w, xe);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(results.f32() + rows[i] * d, ye.f32() + i * d, static_cast<size_t>(d) * 4);
  }

  // Combine: the results travel back the way they came, into the dispatch order.
  Tensor back = Tensor::host(DType::kF32, {sent, d});
  g.all_to_all(results, recv_rows, back, send_rows, "combine");
  if (g.reverse_combine) {  // the negative control: each destination's block read backwards
    int64_t begin = 0;
    for (int s = 0; s < size; ++s) {
      for (int64_t& a : at)
        if (a >= begin && a < begin + send_rows[s]) a = begin + (begin + send_rows[s] - 1 - a);
      begin += send_rows[s];
    }
  }

  // Router weights in token order: each row's slots by ascending expert id, as moe_experts adds
  // its experts' contributions.
  const int64_t pad = (n + size - 1) / size;
  Tensor local = Tensor::host(DType::kF32, {pad, d});
  std::vector<int64_t> order(static_cast<size_t>(k));
  for (int64_t t = lo; t < hi; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r.ids[t * k + a] < r.ids[t * k + b]; });
    float* o = local.f32() + (t - lo) * d;
    for (int64_t j : order) {
      const float wt = r.weights[t * k + j];
      const float* y = back.f32() + at[static_cast<size_t>((t - lo) * k + j)] * d;
      for (int64_t c = 0; c < d; ++c) o[c] += wt * y[c];
    }
  }

  // Every rank's rows, padded to the same count for the all-gather, back in row order.
  Tensor gathered = Tensor::host(DType::kF32, {pad * size, d});
  g.all_gather(local, gathered);
  Tensor out_host = Tensor::host(DType::kF32, {n, d});
  for (int s = 0; s < size; ++s) {
    const int64_t b = s * n / size, e = (s + 1) * n / size;
    if (e > b)
      std::memcpy(out_host.f32() + b * d, gathered.f32() + s * pad * d, static_cast<size_t>((e - b) * d) * 4);
  }
  return be.to_device(out_host);
}

}  // namespace dayzero::model::blocks
