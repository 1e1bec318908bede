// DZ_CHECK: invariants that must hold whatever the input. A failure logs the statement,
// file, line and rank, then aborts the whole job (MPI_Abort when MPI is up, exit 3).
// Not for bad input: that travels as a Status (status.h).
#pragma once

#include <sstream>
#include <string>

namespace dayzero {
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace dayzero

#define DZ_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      std::ostringstream dz_msg_;                                                        \
      dz_msg_ << "" __VA_OPT__(<< __VA_ARGS__);                                          \
      ::dayzero::check_failed(#cond, __FILE__, __LINE__, dz_msg_.str());                 \
    }                                                                                    \
  } while (0)
