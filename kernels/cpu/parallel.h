// Internal to kernels/cpu: the kernels' thread count and parallel_for over one process-wide
// pool of worker threads. Not a scheduler: a worker runs only while a kernel call is in
// flight, spins for a short bounded time after it (the next kernel of a decode step follows
// within microseconds), then sleeps on a futex, so nothing competes with MPI ranks or a BLAS
// library between kernels. Each index is computed by exactly one thread with the same code,
// so results do not depend on the thread count or on which thread took which chunk.
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
// threads (the caller's thread among them); returns when every chunk is done. Runs inline
// when one chunk covers n, when called from inside another parallel_for (nested), and when
// another thread's parallel_for holds the pool (concurrent callers never wait for each other).
// An exception thrown by fn is rethrown to the caller after every chunk has been claimed.
// Thread-safe; fork-safe (a child process starts a fresh pool on its first call).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// parallel_for for work that streams through memory in index order (each GEMM column tile):
// thread t of T owns the contiguous share [t * n / T, (t + 1) * n / T) and claims it from the
// front, half of what is left each time (never under min_grain), so each thread reads one
// stream; a thread whose share is done takes half of what is left of the largest other share
// (never under min_grain) from its back, so a thread the OS descheduled holds up little. For
// work whose result per index does not depend on the chunk it falls in.
void parallel_for_shares(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

// How long an idle worker spins before it sleeps, in microseconds (tests and the bench;
// default kPoolSpinUs). 0 = sleep at once.
inline constexpr int kPoolSpinUs = 50;
void set_pool_spin_us(int us);

// Nanoseconds the calling thread has so far spent runnable but waiting for a CPU (the kernel's
// /proc/thread-self/schedstat), -1 where the kernel does not say. The pool's sign of a
// contended core: after an involuntary context switch a thread stops spinning only when it
// waited for a CPU for more than kContendedWaitShare of the wall time since it last looked
// (pool_core_contended).
int64_t thread_run_delay_ns();
inline constexpr double kContendedWaitShare = 0.1;
// That rule on the run-queue wait and the wall time between two looks (true where the wait is
// unknown, -1: every involuntary switch then counts).
bool pool_core_contended(int64_t waited_ns, int64_t wall_ns);

}  // namespace dayzero::kernels::cpu
