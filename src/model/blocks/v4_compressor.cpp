// DeepSeek-V4's KV compressor (v4_compressor.h): projections, the window buffer, the gated
// softmax pooling (with CSA's overlap), RMSNorm and the interleaved rotary of each entry.
#include "model/blocks/v4_compressor.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/blocks/row_linear.h"
#include "model/blocks/v4_attention.h"

namespace dayzero::model::blocks {

namespace {

}  // namespace

int64_t compress_kv(const CompressorSizes& s, CompressorState& st, std::span<const float> x, int64_t n,
                    std::span<const float> wkv, std::span<const float> wgate, std::span<const float> ape,
                    std::span<const float> norm, std::span<const float> inv_freq) {
  const int64_t hd = s.head_dim, width = s.coff * hd, rate = s.rate;
  DZ_CHECK(s.coff == 1 || s.coff == 2, "compressor coff " << s.coff);
  DZ_CHECK(static_cast<int64_t>(x.size()) == n * s.d && static_cast<int64_t>(wkv.size()) == width * s.d &&
               wkv.size() == wgate.size() && static_cast<int64_t>(ape.size()) == rate * width &&
               static_cast<int64_t>(norm.size()) == hd && static_cast<int64_t>(inv_freq.size()) * 2 == s.rope_dim &&
               s.rope_dim <= hd,
           "compress_kv: sizes of " << n << " rows x " << s.d << " into entries of " << hd);
  // The new rows' projections join the window not yet closed.
  const size_t old = st.pending_kv.size();
  st.pending_kv.resize(old + n * width);
  st.pending_gate.resize(old + n * width);
  row_linear(x.data(), n, s.d, wkv.data(), width, st.pending_kv.data() + old);
  row_linear(x.data(), n, s.d, wgate.data(), width, st.pending_gate.data() + old);
  const int64_t rows = static_cast<int64_t>(st.pending_kv.size()) / width, windows = rows / rate;
  const int64_t slots = s.coff * rate;  // gated slots per entry
  std::vector<float> kv(slots * hd), gate(slots * hd), entry(hd);
  for (int64_t w = 0; w < windows; ++w) {
    const float* ckv = st.pending_kv.data() + w * rate * width;
    const float* cgate = st.pending_gate.data() + w * rate * width;
    // Slots: CSA first the previous window's Ca (zero kv, -inf gate when there is none), then
    // this window's Cb; HCA this window's rows. Gates carry the per-position bias.
    const int64_t own = s.coff == 2 ? rate : 0;  // first slot of this window's series
    if (s.coff == 2) {
      const bool prior = !st.overlap_kv.empty();
      for (int64_t j = 0; j < rate; ++j)
        for (int64_t c = 0; c < hd; ++c) {
          kv[j * hd + c] = prior ? st.overlap_kv[j * hd + c] : 0.0f;
          gate[j * hd + c] = prior ? st.overlap_gate[j * hd + c] : -INFINITY;
        }
    }
    for (int64_t j = 0; j < rate; ++j)
      for (int64_t c = 0; c < hd; ++c) {
        const int64_t src = j * width + (s.coff == 2 ? hd : 0) + c;
        kv[(own + j) * hd + c] = ckv[src];
        gate[(own + j) * hd + c] = cgate[src] + ape[src];
      }
    if (s.coff == 2) {  // this window's Ca (gate with its bias) overlaps the next entry
      st.overlap_kv.assign(rate * hd, 0.0f);
      st.overlap_gate.assign(rate * hd, 0.0f);
      for (int64_t j = 0; j < rate; ++j)
        for (int64_t c = 0; c < hd; ++c) {
          st.overlap_kv[j * hd + c] = ckv[j * width + c];
          st.overlap_gate[j * hd + c] = cgate[j * width + c] + ape[j * width + c];
        }
    }
    // Softmax over the slots, per channel; the gated sum.
    for (int64_t c = 0; c < hd; ++c) {
      float mx = -INFINITY;
      for (int64_t j = 0; j < slots; ++j) mx = std::max(mx, gate[j * hd + c]);
      float sum = 0, acc = 0;
      for (int64_t j = 0; j < slots; ++j) {
        const float e = std::exp(gate[j * hd + c] - mx);
        sum += e;
        acc += kv[j * hd + c] * e;
      }
      entry[c] = acc / sum;
    }
    // RMSNorm with its weight, then the rotary at the window's first position.
    v4_rmsnorm(entry.data(), hd, norm.data(), s.rms_eps);
    const auto pos = static_cast<float>((st.n_entries + w) * rate);
    float* r = entry.data() + hd - s.rope_dim;
    for (int64_t i = 0; i < s.rope_dim / 2; ++i) {
      const float a = pos * inv_freq[i], cs = std::cos(a), sn = std::sin(a);
      const float x0 = r[2 * i], x1 = r[2 * i + 1];
      r[2 * i] = x0 * cs - x1 * sn;
      r[2 * i + 1] = x1 * cs + x0 * sn;
    }
    st.entries.insert(st.entries.end(), entry.begin(), entry.end());
  }
  st.n_entries += windows;
  st.pending_kv.erase(st.pending_kv.begin(), st.pending_kv.begin() + windows * rate * width);
  st.pending_gate.erase(st.pending_gate.begin(), st.pending_gate.begin() + windows * rate * width);
  return windows;
}

}  // namespace dayzero::model::blocks
