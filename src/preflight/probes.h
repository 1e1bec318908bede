// The minimal tests of `dayzero preflight`, each timing one thing the job will do: a GEMM on
// this rank, a cold read of the checkpoint's shards (or a scratch file) on this node, copies
// between pinned host memory and this rank's GPU, and the collectives of the plan's groups
// through the same Comm calls as the job, on the buffers the job uses (device tensors on CUDA),
// so the op observer's watchdog covers them. Figures only: the verdicts are classes.h's. Not
// the inventory, nor which Comm fronts a group (transport.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/status.h"

namespace dayzero::preflight {

// Best of `reps` timed f32 GEMMs y[n, n] = x[n, n] · w[n, n]^T (kernels::matmul_nt, one warm-up),
// in GFLOP/s.
double gemm_gflops(int64_t n, int reps);

struct ReadFigure {
  double bytes_per_s = 0;
  int64_t bytes = 0;
  std::string source;  // "checkpoint shards" or "scratch file"
};

// A read of up to `limit` bytes of `files` in order (the checkpoint's shards), or, when files is
// empty, of a scratch file of `limit` bytes written into scratch_dir (named after host) and
// removed after. The file's cached pages are dropped first (posix_fadvise DONTNEED), so the
// read comes from the device where the kernel allows. IoError names the file.
Result<ReadFigure> read_rate(const std::vector<std::string>& files, const std::string& scratch_dir,
                             const std::string& host, int64_t limit);

// Bus bandwidth as nccl-tests defines it (bytes/s), algbw = bytes / time:
//   all-reduce: algbw * 2 (n - 1) / n;  all-to-all: algbw * (n - 1) / n;  send/recv: algbw.
struct CollectiveFigure {
  double algbw = 0, busbw = 0;  // bytes/s
  double seconds = 0;           // per call, the slowest rank of the group
};

// The buffers of the three below live on be's device (the CUDA backend: device tensors, which
// g's NcclComm or StagedComm moves as in the job); be null: host tensors.
// Collective over g: `reps` all-reduces of `bytes` of f32 after one warm-up; every rank gets
// the same figure. REQUIRES: g.size() > 1.
Result<CollectiveFigure> all_reduce_figure(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps);
// Collective over g: all-to-alls with bytes / size() to each peer.
Result<CollectiveFigure> all_to_all_figure(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps);
// Collective over g (a pipeline group): for each hop s -> s + 1 in turn, `bytes` sent `reps`
// times; figure h is hop h's, the same on every rank.
Result<std::vector<CollectiveFigure>> send_recv_hops(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps);
// Collective over g (one rank per node): every pair (i, j), i < j, in turn exchanges `bytes`
// each way `reps` times while the others wait; figure k is pair k in the order
// (0,1), (0,2), ..., (1,2), ...; algbw = 2 * bytes / the fastest of the round trips.
Result<std::vector<CollectiveFigure>> pairwise_exchange(comm::Comm& g, int64_t bytes, int reps);

// Copies between pinned host memory (cudaMallocHost) and CUDA device `device`, bytes/s.
struct CopyFigure {
  double h2d = 0, d2h = 0;  // the best of the timed copies each way
  int64_t bytes = 0;
};
// The best of `reps` copies of `bytes` each way (after one warm-up each) on a stream of its own,
// timed by CUDA events; the buffers are freed on return. Unsupported in a build without CUDA;
// Internal naming the CUDA call that failed (its memory, the device, the copy).
Result<CopyFigure> host_device_copy(int device, int64_t bytes, int reps);

}  // namespace dayzero::preflight
