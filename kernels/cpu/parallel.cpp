// kernel_threads() and parallel_for(): see parallel.h. Not a pool: a kernel call that is
// worth splitting (milliseconds of work) pays tens of microseconds to start its threads.
#include "kernels/cpu/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

namespace dayzero::kernels::cpu {
namespace {

int positive_env(const char* name) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  return (end != s && v > 0 && v < 4096) ? static_cast<int>(v) : 0;
}

std::atomic<int>& threads_setting() {
  static std::atomic<int> n{default_kernel_threads()};
  return n;
}

}  // namespace

int default_kernel_threads() {
  for (const char* name : {"DAYZERO_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (int v = positive_env(name)) return v;
  }
  // The affinity mask, not the machine: MPI launchers bind ranks to a subset of cores.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int kernel_threads() { return threads_setting().load(std::memory_order_relaxed); }

void set_kernel_threads(int n) { threads_setting().store(std::max(1, n), std::memory_order_relaxed); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int n_threads = static_cast<int>(std::min<int64_t>(kernel_threads(), n_chunks));
  if (n_threads <= 1) {
    fn(0, n);
    return;
  }
  // Chunks are handed out in order from a shared counter: the causal attention rows grow in
  // cost, so a static split would leave one thread with most of the work.
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      fn(c * grain, std::min(n, (c + 1) * grain));
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace dayzero::kernels::cpu
