// y [n, out] = x [n, in] . w [out, in]^T with each row summed alone, in input order: a row's bits
// do not depend on how many rows come with it, which the DeepSeek-V4 compressor's "any split of
// the input gives the same entries" rests on (the CPU GEMM takes another path above 16 rows).
#pragma once

#include <cstdint>

namespace dayzero::model::blocks {

inline void row_linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
}

}  // namespace dayzero::model::blocks
