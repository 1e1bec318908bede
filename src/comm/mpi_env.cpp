// MPI set-up and the fail-together helpers.
#include "comm/mpi_env.h"

#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <vector>

#include "comm/op_watch.h"
#include "core/clock.h"

namespace dayzero::comm {
namespace {

// The helpers below use MPI_COMM_WORLD directly; they report to the op observer as group
// "env" (label "world.env") with their own sequence, so the watchdog covers them too.
const std::string kEnvLabel = "world.env";
int64_t g_env_seq = 0;

OpInfo env_op(const char* name, int64_t bytes) {
  OpInfo info;
  info.kind = "collective";
  info.op = name;
  info.group = "env";
  info.label = &kEnvLabel;
  info.seq = g_env_seq++;
  info.bytes = bytes;
  return info;
}

}  // namespace

MpiEnv::MpiEnv(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // MULTIPLE so that the watchdog thread may call MPI_Abort (FUNNELED allows MPI calls
    // from the main thread only); the main thread still makes every other call.
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
    owns_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  hostname_ = host;
}

MpiEnv::~MpiEnv() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

std::string broadcast_string(const std::string& s) {
  WatchedOp watched(env_op("broadcast_string", static_cast<int64_t>(s.size())));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int64_t n = static_cast<int64_t>(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string out = rank == 0 ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  return out;
}

std::vector<std::string> all_gather_strings(const std::string& s) {
  WatchedOp watched(env_op("all_gather_strings", static_cast<int64_t>(s.size())));
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int n = static_cast<int>(s.size());
  std::vector<int> sizes(world), offsets(world);
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < world; ++r) {
    offsets[r] = total;
    total += sizes[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(s.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

int64_t all_reduce_min(int64_t v) {
  WatchedOp watched(env_op("all_reduce_min", 8));
  int64_t out = v;
  MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return out;
}

Status agree(const Status& local) {
  WatchedOp watched(env_op("agree", 4));
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int code = static_cast<int>(local.code());
  std::vector<int> codes(world);
  MPI_Allgather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int first = -1, failing = 0;
  for (int r = 0; r < world; ++r)
    if (codes[r] != 0) {
      ++failing;
      if (first < 0) first = r;
    }
  if (first < 0) return Status::Ok();
  // The first failing rank's message travels to everyone.
  int64_t n = rank == first ? static_cast<int64_t>(local.message().size()) : 0;
  MPI_Bcast(&n, 1, MPI_INT64_T, first, MPI_COMM_WORLD);
  std::string msg = rank == first ? local.message() : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) MPI_Bcast(msg.data(), static_cast<int>(n), MPI_CHAR, first, MPI_COMM_WORLD);
  std::string prefix = "rank " + std::to_string(first);
  if (failing > 1) prefix += " (and " + std::to_string(failing - 1) + " other rank(s))";
  return Status(static_cast<StatusCode>(codes[first]), world > 1 ? prefix + ": " + msg : msg);
}

int64_t measure_clock_offset_ns() {
  WatchedOp watched(env_op("clock_offset", 16));
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int64_t offset = 0;
  constexpr int kRounds = 5;
  for (int r = 1; r < world; ++r) {
    if (rank == 0) {
      for (int i = 0; i < kRounds; ++i) {
        int64_t dummy = 0;
        MPI_Recv(&dummy, 1, MPI_INT64_T, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int64_t t0 = realtime_ns();
        MPI_Send(&t0, 1, MPI_INT64_T, r, 78, MPI_COMM_WORLD);
      }
    } else if (rank == r) {
      int64_t best_rtt = INT64_MAX;
      for (int i = 0; i < kRounds; ++i) {
        const int64_t a = realtime_ns();
        MPI_Send(&a, 1, MPI_INT64_T, 0, 77, MPI_COMM_WORLD);
        int64_t t0 = 0;
        MPI_Recv(&t0, 1, MPI_INT64_T, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int64_t b = realtime_ns();
        if (b - a < best_rtt) {
          best_rtt = b - a;
          offset = (a + b) / 2 - t0;
        }
      }
    }
  }
  return offset;
}

}  // namespace dayzero::comm
