// Rotary embedding (ops.h), HF rotate-half, in place. The angle is the f32 product position *
// inv_freq, as HF forms it, so long positions round the same way; its cos/sin are evaluated in
// double and rounded once (rope_angles). Every layer of a forward rotates q and k at the same
// positions, so callers that keep the table (the CPU backend) pay the sincos once per forward.
// Not the inv_freq schedule (YaRN, NTK, llama3 scaling): the caller passes inv_freq already scaled.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void rope_angles(int64_t n_tokens, int64_t half, const int32_t* positions, const float* inv_freq, float* cos_t,
                 float* sin_t) {
  // A chunk is about 50 us: a double sincos costs some 30 times a rotated element.
  const int64_t grain = std::max<int64_t>(1, 32768 / (32 * half));
  parallel_for(n_tokens, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        cos_t[t * half + i] = static_cast<float>(std::cos(double(angle)));
        sin_t[t * half + i] = static_cast<float>(std::sin(double(angle)));
      }
    }
  });
}

void rope_rotate_half_table(int64_t n_tokens, int64_t n_head, int64_t head_dim, const float* cos_t,
                            const float* sin_t, float* x) {
  DZ_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope head_dim " << head_dim << " must be even");
  const int64_t half = head_dim / 2;
  // Tokens are independent, each computed by the same code on whichever thread.
  const int64_t grain = std::max<int64_t>(1, 32768 / (n_head * head_dim));
  parallel_for(n_tokens, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cos_t + t * half;
      const float* s = sin_t + t * half;
      for (int64_t h = 0; h < n_head; ++h) {
        float* v = x + (t * n_head + h) * head_dim;  // [head_dim]
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

void rope_rotate_half(int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
                      const float* inv_freq, float* x) {
  DZ_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope head_dim " << head_dim << " must be even");
  const int64_t half = head_dim / 2;
  std::vector<float> cos_t(n_tokens * half), sin_t(n_tokens * half);  // [n_tokens, head_dim / 2]
  rope_angles(n_tokens, half, positions, inv_freq, cos_t.data(), sin_t.data());
  rope_rotate_half_table(n_tokens, n_head, head_dim, cos_t.data(), sin_t.data(), x);
}

}  // namespace dayzero::kernels::cpu
