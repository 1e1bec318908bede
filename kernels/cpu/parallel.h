// Internal to kernels/cpu: the kernels' thread count and a static-free parallel_for.
// Not a scheduler: threads are started per call and joined before it returns, so nothing
// outlives a kernel and nothing competes with MPI or the BLAS library between calls.
// Each index is computed by exactly one thread with the same code, so results do not
// depend on how the range was split.
#pragma once

#include <cstdint>
#include <functional>

namespace dayzero::kernels::cpu {

// Threads the kernels may use: DAYZERO_THREADS, else OPENBLAS_NUM_THREADS, else
// OMP_NUM_THREADS, else the CPUs this process may run on. Read once, then set by
// gemm_set_threads().
int kernel_threads();
void set_kernel_threads(int n);
// The environment default described above (>= 1).
int default_kernel_threads();

// Calls fn(begin, end) over [0, n) in chunks of `grain` indices, on up to kernel_threads()
// threads (the caller's thread among them). Runs inline when one chunk covers n.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace dayzero::kernels::cpu
