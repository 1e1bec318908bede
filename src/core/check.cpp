// check_failed: the one place an invariant violation ends the job.
#include "core/check.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace dayzero {

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "dayzero: rank %d: CHECK failed at %s:%d: %s%s%s\n", rank, file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
  std::exit(3);
}

}  // namespace dayzero
