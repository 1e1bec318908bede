// rmsnorm (ops.h): HF LlamaRMSNorm in f32. The sum of squares runs in SIMD lanes with a
// fixed order; the scale is applied as w * (x * r), the order HF multiplies in. add_rmsnorm is
// the residual add and the norm of its result in one pass, with the bits of the two ops.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

namespace {

// Rows per chunk: about 2^16 elements at least (a pass over memory this cheap is worth a
// thread only when it is long; every split point is a join where a descheduled thread stalls
// the call on a loaded node), and the rows split evenly over the threads beyond that.
int64_t row_grain(int64_t rows, int64_t width) {
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 16) / width);
  const int64_t even = (rows + kernel_threads() - 1) / kernel_threads();
  return std::max(min_rows, even);
}

void rmsnorm_row(int64_t width, const float* xr, const float* w, float eps, float* yr) {
  const float mean = simd::sum_squares(xr, width) / static_cast<float>(width);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < width; ++i) yr[i] = w[i] * (xr[i] * inv);
}

}  // namespace

void rmsnorm(int64_t rows, int64_t width, const float* x, const float* w, float eps, float* y) {
  DZ_CHECK(rows >= 0 && width > 0, "rmsnorm rows " << rows << " width " << width);
  parallel_for(rows, row_grain(rows, width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rmsnorm_row(width, x + r * width, w, eps, y + r * width);
  });
}

void add_rmsnorm(int64_t rows, int64_t width, const float* delta, float* residual, const float* w, float eps,
                 float* y) {
  DZ_CHECK(rows >= 0 && width > 0, "add_rmsnorm rows " << rows << " width " << width);
  parallel_for(rows, row_grain(rows, width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = residual + r * width;  // [width]
      const float* dr = delta + r * width;
      for (int64_t i = 0; i < width; ++i) xr[i] += dr[i];
      rmsnorm_row(width, xr, w, eps, y + r * width);
    }
  });
}

}  // namespace dayzero::kernels::cpu
