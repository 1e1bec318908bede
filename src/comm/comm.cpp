// The implementation-independent part of the Comm interface: the argmax tie-break rule that
// every implementation of argmax_across shares, and the process-wide op observer
// (op_watch.h). Not a Comm implementation (mpi_comm.cpp).
#include "comm/comm.h"

#include <atomic>
#include <cmath>

#include "comm/op_watch.h"

namespace dayzero::comm {
namespace {
std::atomic<OpObserver*> g_observer{nullptr};
}  // namespace

void set_op_observer(OpObserver* observer) { g_observer.store(observer, std::memory_order_release); }
OpObserver* op_observer() { return g_observer.load(std::memory_order_acquire); }

bool argmax_prefers(float a, int64_t ia, float b, int64_t ib) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

}  // namespace dayzero::comm
