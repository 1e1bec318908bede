// kernel_threads() and parallel_for() over a persistent worker pool: see parallel.h. Not a
// task system: one job at a time, the caller among its threads, no queue; the only stealing is
// parallel_for_shares' (a thread done with its share takes from the back of another's).
//
// Memory ordering (the whole protocol; a reader should not need a race detector to check it):
// - The caller holds `busy` for the job. It writes the job fields (fn, n, grain, n_chunks,
//   next, pending, error) with plain or relaxed stores, then for each participating worker
//   stores a new value into that worker's `slot.gen` (seq_cst, which includes release). A
//   worker that loads the new value (acquire or stronger) sees the job fields.
// - Chunks are handed out by `next.fetch_add` or by compare-and-swap on a share's range (relaxed:
//   they only decide who computes what; the shares are written before the job is published).
// - A worker's last act on a job is `pending.fetch_sub` (seq_cst, includes release); the
//   caller returns only after loading pending == 0 (acquire), so every worker's writes to the
//   outputs happen-before the caller's return, and no worker touches the job afterwards.
// - Sleeping uses Dekker's pattern on both sides, all seq_cst: the sleeper announces itself
//   (slot.sleeping = 1 / caller_sleeping = 1), re-checks the word, then futex-waits on that word's
//   old value (the kernel re-checks it atomically); the waker stores the word, then reads the flag
//   and wakes only if it is set. Either the sleeper sees the new word or the waker sees the flag.
#include "kernels/cpu/parallel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

std::atomic<int> g_spin_us{kPoolSpinUs};

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t old) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word, int n) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

// Whether this thread may spin at all. Spinning only pays when the core is ours: on a
// contended core (other ranks or processes runnable there) the spinning thread burns its own
// fair share and the scheduler takes it back from the work (measured: 50 us of spin at load
// average 14 on 2 cores cost a third of decode throughput, docs/gemm.md "One thread pool").
// The sign of contention is an involuntary context switch of this thread after which it had
// waited for a CPU (runnable, not running) for more than a tenth of the time since the one
// before: then it does not spin for its next kNoSpinWaits waits. The wait is the kernel's own
// count (/proc/thread-self/schedstat); without it every involuntary switch counts. An idle VM
// preempts a busy thread some 25 times a second, each time briefly: on a
// 2-vCPU Xeon that alone kept the pool from spinning most of the time: batch-1 decode read its
// weights at 0.84-0.87 of a plain read, with this rule 0.93-0.97 (docs/performance.md).
constexpr int kNoSpinWaits = 256;
thread_local long t_last_nivcsw = -1;
thread_local int t_no_spin = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The run-queue wait and the time at the thread's last look.
thread_local int64_t t_last_wait_ns = -1;
thread_local int64_t t_last_look_ns = 0;

// After an involuntary switch: whether this thread waited for a CPU for more than
// kContendedWaitShare of the time since the last look.
bool waited_for_a_cpu() {
  const int64_t wait = thread_run_delay_ns(), at = now_ns();
  const int64_t last_wait = std::exchange(t_last_wait_ns, wait), last_at = std::exchange(t_last_look_ns, at);
  if (wait < 0 || last_wait < 0) return true;
  return pool_core_contended(wait - last_wait, at - last_at);
}

bool core_uncontended() {
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return false;
  if (t_last_nivcsw < 0) t_last_wait_ns = thread_run_delay_ns(), t_last_look_ns = now_ns();
  const bool preempted = t_last_nivcsw >= 0 && ru.ru_nivcsw != t_last_nivcsw;
  t_last_nivcsw = ru.ru_nivcsw;
  if (preempted && waited_for_a_cpu()) t_no_spin = kNoSpinWaits;
  if (t_no_spin > 0) {
    --t_no_spin;
    return false;
  }
  return true;
}

// Spins until pred() holds or spin_us passes; false when it gave up (the caller then sleeps).
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  const int us = g_spin_us.load(std::memory_order_relaxed);
  if (us <= 0 || !core_uncontended()) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      cpu_relax();
      if (pred()) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

// Set on the pool's workers for good and on a caller while its job runs: a parallel_for
// reached from inside a chunk runs inline instead of waiting for the pool it is part of.
thread_local bool t_inside_pool = false;

struct alignas(64) Slot {
  std::atomic<uint32_t> gen{0};       // futex word: bumped by the caller for each job this worker joins
  std::atomic<uint32_t> sleeping{0};  // 1 while the worker is in (or entering) futex_wait on gen
};

// One thread's share of a parallel_for_shares job: the indices [front, back) not yet claimed,
// in one word so that its owner (taking from the front) and a thief (from the back) agree by
// compare-and-swap.
struct alignas(64) Share {
  std::atomic<uint64_t> range{0};
};
inline uint64_t pack_range(int64_t front, int64_t back) {
  return static_cast<uint64_t>(front) | (static_cast<uint64_t>(back) << 32);
}
inline int64_t range_front(uint64_t v) { return static_cast<int64_t>(v & 0xffffffffu); }
inline int64_t range_back(uint64_t v) { return static_cast<int64_t>(v >> 32); }

enum class Schedule { kFixed, kShares };

class Pool {
 public:
  // Runs the job on n_threads threads (caller included). REQUIRES: 2 <= n_threads.
  // kShares: REQUIRES n < 2^32.
  void run(int64_t n, int64_t grain, Schedule schedule, int n_threads, const std::function<void(int64_t, int64_t)>& fn) {
    ensure_workers(n_threads - 1);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    n_chunks_ = (n + grain - 1) / grain;
    schedule_ = schedule;
    n_threads_ = n_threads;
    next_.store(0, std::memory_order_relaxed);
    if (schedule == Schedule::kShares) {
      if (static_cast<int>(shares_.size()) < n_threads) shares_ = std::vector<Share>(static_cast<size_t>(n_threads));
      for (int t = 0; t < n_threads; ++t)
        shares_[t].range.store(pack_range(n * t / n_threads, n * (t + 1) / n_threads), std::memory_order_relaxed);
    }
    error_ = nullptr;
    pending_.store(static_cast<uint32_t>(n_threads - 1), std::memory_order_relaxed);
    for (int w = 0; w < n_threads - 1; ++w) {
      Slot& s = *slots_[w];
      s.gen.fetch_add(1, std::memory_order_seq_cst);
      if (s.sleeping.load(std::memory_order_seq_cst) != 0) futex_wake(&s.gen, 1);
    }
    t_inside_pool = true;
    run_chunks(0);
    t_inside_pool = false;
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      for (;;) {
        caller_sleeping_.store(1, std::memory_order_seq_cst);
        const uint32_t p = pending_.load(std::memory_order_seq_cst);
        if (p == 0) break;
        futex_wait(&pending_, p);
      }
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
    fn_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  std::mutex busy;  // held by the caller whose job the workers run

 private:
  // `self`: 0 the caller, w + 1 worker w (its share under kShares).
  void run_chunks(int self) {
    int64_t begin, end;
    while (schedule_ == Schedule::kShares ? claim_own(self, begin, end) || claim_stolen(begin, end)
                                          : claim(begin, end)) {
      try {
        (*fn_)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  // kFixed: chunk c is [c * grain, (c + 1) * grain), handed out in order from a shared counter
  // (the causal attention rows grow in cost, so a static split would leave one thread with most
  // of the work). False when none is left.
  bool claim(int64_t& begin, int64_t& end) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= n_chunks_) return false;
    begin = c * grain_;
    end = std::min(n_, begin + grain_);
    return true;
  }

  // kShares, from the front of the thread's own share: half of what is left of it, never under
  // grain, so its chunks follow one another in memory order and at most half of its rest is
  // ever out of a thief's reach.
  bool claim_own(int self, int64_t& begin, int64_t& end) {
    std::atomic<uint64_t>& range = shares_[self].range;
    uint64_t v = range.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t f = range_front(v), b = range_back(v);
      if (f >= b) return false;
      const int64_t e = std::min(b, f + std::max(grain_, (b - f) / 2));
      if (range.compare_exchange_weak(v, pack_range(e, b), std::memory_order_relaxed)) {
        begin = f;
        end = e;
        return true;
      }
    }
  }

  // kShares, once the thread's own share is done: half of what is left of the largest share,
  // never under grain, from its back (its owner keeps reading forward from its front).
  bool claim_stolen(int64_t& begin, int64_t& end) {
    for (;;) {
      int most = -1;
      uint64_t v = 0;
      int64_t left = 0;
      for (int t = 0; t < n_threads_; ++t) {
        const uint64_t r = shares_[t].range.load(std::memory_order_relaxed);
        if (range_back(r) - range_front(r) > left) most = t, v = r, left = range_back(r) - range_front(r);
      }
      if (most < 0) return false;
      const int64_t f = range_front(v), b = range_back(v);
      const int64_t s = std::max(f, b - std::max(grain_, left / 2));
      if (shares_[most].range.compare_exchange_strong(v, pack_range(f, s), std::memory_order_relaxed)) {
        begin = s;
        end = b;
        return true;
      }
    }
  }

  void worker(Slot* slot, int self, uint32_t seen) {
    t_inside_pool = true;
    for (;;) {
      uint32_t g = 0;
      auto arrived = [&] { return (g = slot->gen.load(std::memory_order_acquire)) != seen; };
      if (!spin_until(arrived)) {
        for (;;) {
          slot->sleeping.store(1, std::memory_order_seq_cst);
          g = slot->gen.load(std::memory_order_seq_cst);
          if (g != seen) break;
          futex_wait(&slot->gen, seen);
        }
        slot->sleeping.store(0, std::memory_order_relaxed);
      }
      seen = g;
      run_chunks(self);
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst) != 0) {
        futex_wake(&pending_, 1);
      }
    }
  }

  // Called with `busy` held, between jobs: every existing worker is idle.
  void ensure_workers(int n) {
    while (static_cast<int>(slots_.size()) < n) {
      slots_.push_back(std::make_unique<Slot>());
      Slot* slot = slots_.back().get();
      const int self = static_cast<int>(slots_.size());  // worker w is thread w + 1
      // Detached and never joined: the pool lives for the process (it is never destroyed, so
      // no static destructor can run while a worker sleeps in it).
      std::thread([this, slot, self, seen = slot->gen.load(std::memory_order_relaxed)] { worker(slot, self, seen); })
          .detach();
    }
  }

  std::vector<std::unique_ptr<Slot>> slots_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, n_chunks_ = 0;
  Schedule schedule_ = Schedule::kFixed;
  int n_threads_ = 1;
  std::vector<Share> shares_;
  alignas(64) std::atomic<int64_t> next_{0};
  alignas(64) std::atomic<uint32_t> pending_{0};  // futex word: workers still on the job
  std::atomic<uint32_t> caller_sleeping_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// The process's pool. Made on first use and never freed. A forked child has none of the
// parent's threads, so the child handler drops the pointer (leaking the parent's copy, whose
// mutex may even be held) and the child's first parallel_for makes a fresh pool.
std::atomic<Pool*> g_pool{nullptr};

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(nullptr, std::memory_order_relaxed); });
  });
  auto* made = new Pool;
  if (g_pool.compare_exchange_strong(p, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread won; it has no threads yet
  return *p;
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

int64_t thread_run_delay_ns() {
  struct Fd {
    int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);  // thread-self: this thread's
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local Fd schedstat;
  char buf[128];
  const ssize_t n = schedstat.fd >= 0 ? ::pread(schedstat.fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0) return -1;
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;  // "on-CPU ns, run-queue wait ns, timeslices"
  if (std::sscanf(buf, "%llu %llu", &on_cpu, &waiting) != 2) return -1;
  return static_cast<int64_t>(waiting);
}

bool pool_core_contended(int64_t waited_ns, int64_t wall_ns) {
  if (waited_ns < 0 || wall_ns <= 0) return true;
  return static_cast<double>(waited_ns) > kContendedWaitShare * static_cast<double>(wall_ns);
}

void set_pool_spin_us(int us) { g_spin_us.store(std::max(0, us), std::memory_order_relaxed); }

namespace {

void run_on_pool(int64_t n, int64_t grain, Schedule schedule, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int n_threads = static_cast<int>(std::min<int64_t>(kernel_threads(), n_chunks));
  if (n_threads <= 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  Pool& p = pool();
  std::unique_lock<std::mutex> lock(p.busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    fn(0, n);
    return;
  }
  if (schedule == Schedule::kShares && n >= (int64_t{1} << 32)) schedule = Schedule::kFixed;  // one word a share
  p.run(n, grain, schedule, n_threads, fn);
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  run_on_pool(n, grain, Schedule::kFixed, fn);
}

void parallel_for_shares(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) {
  run_on_pool(n, min_grain, Schedule::kShares, fn);
}

}  // namespace dayzero::kernels::cpu
