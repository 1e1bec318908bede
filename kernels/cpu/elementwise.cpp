// Element-wise ops of ops.h: swiglu (on simd::exp16, 16 elements at a time, the tail through
// a padded block: every element takes the same arithmetic wherever it lies), add_inplace,
// add_bias, embedding (plain loops the compiler vectorises; no reductions, so no reordering
// question). Not fused with a GEMM.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void swiglu(int64_t n, const float* gate, const float* up, float* out) {
  // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) = inf for very negative g gives -0.
  using simd::V16;
  auto block = [](const float* g, const float* u, float* o) {
    V16 gv, uv;
    std::memcpy(&gv, g, sizeof gv);
    std::memcpy(&uv, u, sizeof uv);
    const V16 r = gv / (1.0f + simd::exp16(-gv)) * uv;
    std::memcpy(o, &r, sizeof r);
  };
  parallel_for(n, int64_t{1} << 16, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) block(gate + i, up + i, out + i);
    if (i < i1) {
      float g[16] = {}, u[16] = {}, o[16];
      std::memcpy(g, gate + i, sizeof(float) * (i1 - i));
      std::memcpy(u, up + i, sizeof(float) * (i1 - i));
      block(g, u, o);
      std::memcpy(out + i, o, sizeof(float) * (i1 - i));
    }
  });
}

void add_inplace(int64_t n, const float* x, float* y) {
  // A residual add of a prefill (512 x 576) is 0.3 M elements: worth the pool's second thread.
  parallel_for(n, int64_t{1} << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
  });
}

void add_bias(int64_t rows, int64_t width, const float* b, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * width;  // [width]
    for (int64_t i = 0; i < width; ++i) yr[i] += b[i];
  }
}

void embedding(int64_t n_tokens, const int32_t* ids, int64_t n_rows, int64_t width, const float* table,
               float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = ids[t];
    DZ_CHECK(id >= 0 && id < n_rows, "embedding: token " << t << " has id " << id << ", table has " << n_rows
                                                         << " rows");
    std::memcpy(out + t * width, table + id * width, sizeof(float) * width);
  }
}

}  // namespace dayzero::kernels::cpu
