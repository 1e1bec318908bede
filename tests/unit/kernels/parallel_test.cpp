// parallel_for over the persistent pool (kernels/cpu/parallel.h): every index exactly once
// for every thread count and grain, back-to-back jobs with the workers asleep and awake,
// nested and concurrent callers (inline, no deadlock), exceptions rethrown to the caller,
// and a forked child that runs kernels on a fresh pool. Not a speed test: bench/ measures.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace dayzero::kernels::cpu {
namespace {

// Restores the thread count and spin setting a test changed.
struct PoolSettings {
  int threads = kernel_threads();
  ~PoolSettings() {
    set_kernel_threads(threads);
    set_pool_spin_us(kPoolSpinUs);
  }
};

// Counts how often each index of [0, n) was visited; all must be 1.
void expect_each_index_once(int64_t n, int64_t grain, bool shares = false) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  (shares ? parallel_for_shares : parallel_for)(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i << " n " << n << " grain " << grain;
}

TEST(ParallelFor, EveryIndexOnceForEveryThreadCountAndGrain) {
  PoolSettings restore;
  for (int threads : {1, 2, 3, 5, 8}) {
    set_kernel_threads(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_index_once(n, grain);
    }
  }
}

TEST(ParallelForShares, EveryIndexOnceForEveryThreadCountAndGrain) {
  PoolSettings restore;
  for (int threads : {1, 2, 3, 5, 8}) {
    set_kernel_threads(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_index_once(n, grain, true);
    }
  }
}

TEST(ParallelForShares, EachShareIsTakenFromItsFrontInHalvingChunks) {
  // With 2 threads the shares are [0, 500) and [500, 1000). Each owner takes half of what is left
  // of its share (250, 125, ...), a thief half of what is left of the larger share from its back,
  // neither under min_grain (8) but for a share's last piece: so both shares' fronts start a chunk
  // whoever ran what, no chunk is longer than 250 and there are few claims. The fixed schedule
  // is the negative control: its chunks are all 8 long, 125 of them, and none starts at 500.
  PoolSettings restore;
  set_kernel_threads(2);
  for (bool shares : {true, false}) {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    (shares ? parallel_for_shares : parallel_for)(1000, 8, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      chunks.push_back({b, e});
    });
    std::sort(chunks.begin(), chunks.end());
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks.front().first, 0);
    EXPECT_EQ(chunks.back().second, 1000);
    bool starts_at_500 = false;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t len = chunks[i].second - chunks[i].first;
      if (i + 1 < chunks.size()) {
        ASSERT_EQ(chunks[i].second, chunks[i + 1].first);
      }
      starts_at_500 |= chunks[i].first == 500;
      if (shares) {
        EXPECT_LE(len, 250) << "chunk " << i;
        EXPECT_TRUE(len >= 8 || chunks[i].second == 500 || chunks[i].second == 1000) << "chunk " << i;
      } else {
        EXPECT_EQ(len, 8) << "chunk " << i;
      }
    }
    EXPECT_EQ(starts_at_500, shares);
    if (shares) {
      EXPECT_LT(chunks.size(), 40u);
    } else {
      EXPECT_EQ(chunks.size(), 125u);
    }
  }
}

TEST(ParallelForShares, AThreadDoneWithItsShareTakesFromTheBackOfAnother) {
  // The caller's share [0, 500) is slow (200 us an index), the worker's [500, 1000) fast: one
  // thread ends up running indices of the other's share (the worker normally; the caller where
  // the worker started late), and what a thread ran of another's share is a suffix of it: taken
  // from the back, while the owner read on from its front. Every index runs once.
  PoolSettings restore;
  set_kernel_threads(2);
  set_pool_spin_us(1000);
  const auto caller = std::this_thread::get_id();
  std::vector<std::atomic<int>> by_caller(1000), by_worker(1000);
  parallel_for_shares(1000, 1, [&](int64_t b, int64_t e) {
    const bool is_caller = std::this_thread::get_id() == caller;
    for (int64_t i = b; i < e; ++i) {
      (is_caller ? by_caller : by_worker)[i].fetch_add(1);
      if (i < 500 && is_caller) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  int64_t stolen = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(by_caller[i].load() + by_worker[i].load(), 1) << i;
    const bool foreign = i < 500 ? by_worker[i].load() == 1 : by_caller[i].load() == 1;
    const int64_t share_end = i < 500 ? 500 : 1000;
    if (foreign) {
      ++stolen;
      for (int64_t j = i; j < share_end; ++j)
        ASSERT_EQ(i < 500 ? by_worker[j].load() : by_caller[j].load(), 1) << "index " << i << " taken, " << j << " not";
    }
  }
  EXPECT_GT(stolen, 0);
}

TEST(ParallelFor, ChunksRunOnSeveralThreads) {
  // A control for the test above: with 4 threads and slow chunks, more than one thread works
  // (a pool that ran everything on the caller would pass the index count alone).
  PoolSettings restore;
  set_kernel_threads(4);
  std::atomic<int> in_flight{0}, most{0};
  parallel_for(64, 1, [&](int64_t, int64_t) {
    const int now = in_flight.fetch_add(1) + 1;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    in_flight.fetch_sub(1);
  });
  EXPECT_GE(most.load(), 2);
}

TEST(ParallelFor, BackToBackJobsWithSleepingAndSpinningWorkers) {
  PoolSettings restore;
  set_kernel_threads(3);
  for (int spin : {0, kPoolSpinUs, 2000}) {
    set_pool_spin_us(spin);
    for (int job = 0; job < 300; ++job) {
      std::vector<int> out(97, 0);
      parallel_for(97, 1 + job % 5, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = static_cast<int>(i) * job;
      });
      for (int64_t i = 0; i < 97; ++i) ASSERT_EQ(out[i], i * job) << "spin " << spin << " job " << job;
      if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(3000));  // workers fall asleep
    }
  }
}

TEST(ParallelFor, NestedCallsRunInline) {
  PoolSettings restore;
  set_kernel_threads(4);
  std::vector<std::atomic<int>> seen(16 * 16);
  parallel_for(16, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(16, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) seen[i * 16 + j].fetch_add(1);
      });
    }
  });
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
}

TEST(ParallelFor, ConcurrentCallersEachGetEveryIndexOnce) {
  PoolSettings restore;
  set_kernel_threads(3);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int job = 0; job < 100; ++job) {
        const int64_t n = 50 + c * 13 + job % 7;
        std::vector<int> seen(static_cast<size_t>(n), 0);
        parallel_for(n, 2, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++seen[i];  // each index by one thread only
        });
        for (int v : seen) failures += v != 1;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ParallelFor, ExceptionReachesTheCallerAndThePoolStillWorks) {
  PoolSettings restore;
  set_kernel_threads(3);
  EXPECT_THROW(parallel_for(30, 1, [](int64_t b, int64_t) {
                 if (b == 17) throw std::runtime_error("chunk 17");
               }),
               std::runtime_error);
  expect_each_index_once(1000, 7);
}

// The pool's sign of contention: a thread sharing its CPU with a busy one waits for it about
// half the time, which the run-queue wait shows and the rule calls contended; the rule's own
// arithmetic at its edges.
TEST(PoolContention, RunDelayShowsACpuSharedWithABusyThread) {
  if (thread_run_delay_ns() < 0) GTEST_SKIP() << "the kernel has no /proc/thread-self/schedstat";
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const int64_t wait0 = thread_run_delay_ns();
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) {
  }
  const int64_t waited = thread_run_delay_ns() - wait0;
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  hog.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof mine, &mine), 0);
  EXPECT_GT(static_cast<double>(waited), 2 * kContendedWaitShare * static_cast<double>(wall))
      << waited << " ns waited in " << wall << " ns";
  EXPECT_TRUE(pool_core_contended(waited, wall));
  EXPECT_FALSE(pool_core_contended(1000, 1000000));  // a 1 us preemption in 1 ms
  EXPECT_TRUE(pool_core_contended(200000, 1000000));
  EXPECT_TRUE(pool_core_contended(-1, 1000000));     // unknown wait: contended
}

TEST(ParallelFor, ForkedChildRunsOnAFreshPool) {
  PoolSettings restore;
  set_kernel_threads(3);
  expect_each_index_once(100, 1);  // the parent's workers exist before the fork
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The parent's workers do not exist here; a pool that waited for them would hang until
    // the alarm kills the child.
    alarm(5);
    std::vector<std::atomic<int>> seen(200);
    parallel_for(200, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
    });
    for (auto& s : seen) {
      if (s.load() != 1) _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace dayzero::kernels::cpu
