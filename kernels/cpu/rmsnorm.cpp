// rmsnorm (ops.h): HF LlamaRMSNorm in f32. The sum of squares runs in SIMD lanes with a
// fixed order; the scale is applied as w * (x * r), the order HF multiplies in.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {

void rmsnorm(int64_t rows, int64_t width, const float* x, const float* w, float eps, float* y) {
  DZ_CHECK(rows >= 0 && width > 0, "rmsnorm rows " << rows << " width " << width);
  // About 2^18 elements (a few hundred microseconds) per chunk: a pass over memory this cheap
  // is worth a thread only when it is long; every split point is a join where a descheduled
  // thread stalls the call on a loaded node.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / width);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * width;  // [width]
      float* yr = y + r * width;        // [width]
      const float mean = simd::sum_squares(xr, width) / static_cast<float>(width);
      const float inv = 1.0f / std::sqrt(mean + eps);
      for (int64_t i = 0; i < width; ++i) yr[i] = w[i] * (xr[i] * inv);
    }
  });
}

}  // namespace dayzero::kernels::cpu
