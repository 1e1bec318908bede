// Ops of ops.h that vision encoders need: LayerNorm with bias, the GELU family (erf, tanh
// approximation, quick_gelu) and bidirectional attention without a KV cache. Plain loops,
// f32 storage with f64 reductions; not fused with the GEMMs around them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void layernorm(int64_t rows, int64_t width, const float* x, const float* w, const float* b, float eps, float* y) {
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * width;  // [width]
      float* yr = y + r * width;
      double sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(width);
      double var = 0;
      for (int64_t i = 0; i < width; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(width) + eps);
      for (int64_t i = 0; i < width; ++i) {
        const float v = static_cast<float>((xr[i] - mean) * inv) * w[i];
        yr[i] = b ? v + b[i] : v;
      }
    }
  });
}

void gelu(int64_t n, GeluKind kind, const float* x, float* y) {
  parallel_for(n, int64_t{1} << 16, [&](int64_t i0, int64_t i1) {
    switch (kind) {
      case GeluKind::kErf:
        for (int64_t i = i0; i < i1; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        break;
      case GeluKind::kTanh:
        for (int64_t i = i0; i < i1; ++i) {
          const float v = x[i];
          y[i] = 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
      case GeluKind::kQuick:
        for (int64_t i = i0; i < i1; ++i) y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
        break;
    }
  });
}

void attention_full(int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, const float* q,
                    const float* k, const float* v, float scale, float* out) {
  const int64_t group = n_head / n_head_kv;
  parallel_for(n_tokens * n_head, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> p(static_cast<size_t>(n_tokens));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / n_head, h = i % n_head, hk = h / group;
      const float* qi = q + (t * n_head + h) * head_dim;  // [head_dim]
      float mx = -INFINITY;
      for (int64_t s = 0; s < n_tokens; ++s) {
        const float* ks = k + (s * n_head_kv + hk) * head_dim;
        float dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) dot += qi[d] * ks[d];
        p[s] = dot * scale;
        mx = std::max(mx, p[s]);
      }
      float sum = 0;
      for (int64_t s = 0; s < n_tokens; ++s) sum += (p[s] = std::exp(p[s] - mx));
      float* o = out + (t * n_head + h) * head_dim;
      std::fill(o, o + head_dim, 0.0f);
      for (int64_t s = 0; s < n_tokens; ++s) {
        const float* vs = v + (s * n_head_kv + hk) * head_dim;
        const float a = p[s] / sum;
        for (int64_t d = 0; d < head_dim; ++d) o[d] += a * vs[d];
      }
    }
  });
}

}  // namespace dayzero::kernels::cpu
