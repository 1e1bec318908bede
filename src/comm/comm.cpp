// The implementation-independent part of the Comm interface: the argmax tie-break rule that
// every implementation of argmax_across shares. Not a Comm implementation (mpi_comm.cpp).
#include "comm/comm.h"

#include <cmath>

namespace dayzero::comm {

bool argmax_prefers(float a, int64_t ia, float b, int64_t ib) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

}  // namespace dayzero::comm
