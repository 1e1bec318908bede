// DeepSeek-V4's FFN (v4_ffn.h): clamped SwiGLU experts and shared expert.
#include "model/blocks/v4_ffn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace dayzero::model::blocks {
namespace {

// y [d] += scale * down(silu(clamp(gate . x)) * clamp(up . x)) for one row x [d].
void clamped_swiglu(const float* x, int64_t d, const V4FfnWeights& w, int64_t ff, float limit, float scale, float* y,
                    std::vector<float>& h) {
  DZ_CHECK(static_cast<int64_t>(w.w1.size()) == ff * d && w.w3.size() == w.w1.size() && w.w2.size() == w.w1.size(),
           "v4_ffn: expert weights of " << ff << " x " << d);
  h.resize(ff);
  for (int64_t f = 0; f < ff; ++f) {
    float g = 0, u = 0;
    for (int64_t i = 0; i < d; ++i) g += w.w1[f * d + i] * x[i], u += w.w3[f * d + i] * x[i];
    if (limit > 0) g = std::min(g, limit), u = std::clamp(u, -limit, limit);
    h[f] = g / (1.0f + std::exp(-g)) * u;
  }
  for (int64_t o = 0; o < d; ++o) {
    float acc = 0;
    for (int64_t f = 0; f < ff; ++f) acc += w.w2[o * ff + f] * h[f];
    y[o] += scale * acc;
  }
}

}  // namespace

void v4_ffn(std::span<const float> x, int64_t n, int64_t d, const Routing& r, int64_t n_used,
            const std::function<V4FfnWeights(int)>& expert, int64_t ff, const V4FfnWeights& shared, int64_t shared_ff,
            float limit, std::span<float> out) {
  DZ_CHECK(static_cast<int64_t>(x.size()) == n * d && static_cast<int64_t>(out.size()) == n * d &&
               static_cast<int64_t>(r.ids.size()) == n * n_used && r.weights.size() == r.ids.size(),
           "v4_ffn: sizes of " << n << " rows x " << d);
  std::vector<float> h, routed(d);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * d;
    std::fill(routed.begin(), routed.end(), 0.0f);
    for (int64_t j = 0; j < n_used; ++j)
      clamped_swiglu(xt, d, expert(r.ids[t * n_used + j]), ff, limit, r.weights[t * n_used + j], routed.data(), h);
    float* o = out.data() + t * d;
    std::fill(o, o + d, 0.0f);
    if (shared_ff > 0) clamped_swiglu(xt, d, shared, shared_ff, limit, 1.0f, o, h);
    for (int64_t i = 0; i < d; ++i) o[i] += routed[i];
  }
}

}  // namespace dayzero::model::blocks
