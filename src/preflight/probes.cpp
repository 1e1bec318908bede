// The preflight tests (probes.h): wall clock around the same kernels and Comm calls as the job.
#include "preflight/probes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace dayzero::preflight {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The slowest rank's seconds, agreed over g (ns through the integer max).
Result<double> slowest(comm::Comm& g, double seconds) {
  int64_t ns = static_cast<int64_t>(seconds * 1e9);
  DZ_RETURN_IF_ERROR(g.all_reduce_max_int(&ns, 1));
  return static_cast<double>(ns) * 1e-9;
}

CollectiveFigure figure(int64_t bytes, double seconds, double bus_factor) {
  CollectiveFigure f;
  f.seconds = seconds;
  f.algbw = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  f.busbw = f.algbw * bus_factor;
  return f;
}

// A tensor on be's device (zero-filled), or on the host without a backend.
Tensor test_buffer(backend::Backend* be, Shape shape) {
  return be ? be->empty(DType::kF32, std::move(shape)) : Tensor::host(DType::kF32, std::move(shape));
}

constexpr int64_t kChunk = 4 << 20;

// Reads up to limit bytes of fd after dropping its cached pages; returns bytes read, -1 on error.
int64_t timed_read(int fd, int64_t limit, std::vector<char>& buf, double& seconds) {
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  int64_t done = 0;
  const auto t0 = Clock::now();
  while (done < limit) {
    const ssize_t r = ::read(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(kChunk, limit - done)));
    if (r < 0) return -1;
    if (r == 0) break;
    done += r;
  }
  seconds += since(t0);
  return done;
}

}  // namespace

double gemm_gflops(int64_t n, int reps) {
  std::vector<float> x(static_cast<size_t>(n * n)), w(static_cast<size_t>(n * n)), y(static_cast<size_t>(n * n));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.01f;
    w[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.02f;
  }
  kernels::cpu::matmul_nt(n, n, n, x.data(), w.data(), y.data());
  double best = std::numeric_limits<double>::max();
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    kernels::cpu::matmul_nt(n, n, n, x.data(), w.data(), y.data());
    best = std::min(best, since(t0));
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best * 1e-9;
}

Result<ReadFigure> read_rate(const std::vector<std::string>& files, const std::string& scratch_dir,
                             const std::string& host, int64_t limit) {
  std::vector<char> buf(static_cast<size_t>(kChunk));
  ReadFigure f;
  double seconds = 0;
  if (!files.empty()) {
    f.source = "checkpoint shards";
    for (const auto& path : files) {
      if (f.bytes >= limit) break;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::IoError(path + ": cannot open for the read test: " + std::strerror(errno));
      const int64_t got = timed_read(fd, limit - f.bytes, buf, seconds);
      ::close(fd);
      if (got < 0) return Status::IoError(path + ": read failed: " + std::strerror(errno));
      f.bytes += got;
    }
  } else {
    f.source = "scratch file";
    const std::string path = (std::filesystem::path(scratch_dir) / (".preflight-read-" + host + ".bin")).string();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IoError(path + ": cannot create the read test's scratch file: " + std::strerror(errno));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 131 + 7);
    for (int64_t done = 0; done < limit;) {
      const ssize_t w = ::write(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(kChunk, limit - done)));
      if (w <= 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        ::unlink(path.c_str());
        return Status::IoError(path + ": writing the read test's scratch file failed: " + why);
      }
      done += w;
    }
    (void)::fsync(fd);
    ::close(fd);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int64_t got = fd < 0 ? -1 : timed_read(fd, limit, buf, seconds);
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    if (got < 0) return Status::IoError(path + ": reading the scratch file back failed: " + std::strerror(errno));
    f.bytes = got;
  }
  f.bytes_per_s = seconds > 0 ? static_cast<double>(f.bytes) / seconds : 0;
  return f;
}

Result<CollectiveFigure> all_reduce_figure(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps) {
  const int64_t n = std::max<int64_t>(g.size(), bytes / 4 / g.size() * g.size());
  Tensor t = test_buffer(be, {n});
  DZ_RETURN_IF_ERROR(g.all_reduce_sum(t));
  DZ_RETURN_IF_ERROR(g.barrier());
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) DZ_RETURN_IF_ERROR(g.all_reduce_sum(t));
  DZ_ASSIGN_OR_RETURN(const double s, slowest(g, since(t0) / reps));
  const double k = g.size();
  return figure(n * 4, s, 2 * (k - 1) / k);
}

Result<CollectiveFigure> all_to_all_figure(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps) {
  constexpr int64_t kCols = 256;
  const int64_t rows = std::max<int64_t>(1, bytes / 4 / kCols / g.size());
  const std::vector<int64_t> counts(static_cast<size_t>(g.size()), rows);
  Tensor in = test_buffer(be, {rows * g.size(), kCols});
  Tensor out = test_buffer(be, {rows * g.size(), kCols});
  DZ_RETURN_IF_ERROR(g.all_to_allv(in, counts, out, counts, "dispatch"));
  DZ_RETURN_IF_ERROR(g.barrier());
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) DZ_RETURN_IF_ERROR(g.all_to_allv(in, counts, out, counts, "dispatch"));
  DZ_ASSIGN_OR_RETURN(const double s, slowest(g, since(t0) / reps));
  const double k = g.size();
  return figure(rows * g.size() * kCols * 4, s, (k - 1) / k);
}

Result<std::vector<CollectiveFigure>> send_recv_hops(comm::Comm& g, backend::Backend* be, int64_t bytes, int reps) {
  Tensor t = test_buffer(be, {std::max<int64_t>(1, bytes / 4)});
  std::vector<CollectiveFigure> out;
  for (int h = 0; h + 1 < g.size(); ++h) {
    DZ_RETURN_IF_ERROR(g.barrier());
    double s = 0;
    if (g.rank() == h || g.rank() == h + 1) {
      const auto t0 = Clock::now();
      for (int r = 0; r <= reps; ++r) {  // the first is the warm-up
        if (r == 1) s = -since(t0);
        DZ_RETURN_IF_ERROR(g.rank() == h ? g.send(t, h + 1, 7) : g.recv(t, h, 7));
      }
      s += since(t0);
    }
    DZ_ASSIGN_OR_RETURN(const double worst, slowest(g, s / reps));
    out.push_back(figure(t.numel() * 4, worst, 1.0));
  }
  return out;
}

Result<std::vector<CollectiveFigure>> pairwise_exchange(comm::Comm& g, int64_t bytes, int reps) {
  Tensor t = Tensor::host(DType::kF32, {std::max<int64_t>(1, bytes / 4)});
  std::vector<CollectiveFigure> out;
  for (int i = 0; i < g.size(); ++i)
    for (int j = i + 1; j < g.size(); ++j) {
      DZ_RETURN_IF_ERROR(g.barrier());
      // The fastest round trip after a warm-up: what the link can do, not what a neighbour's
      // burst of load left of it (a slow link is slow in every round).
      double best = 0;
      if (g.rank() == i || g.rank() == j) {
        const int peer = g.rank() == i ? j : i;
        best = std::numeric_limits<double>::max();
        for (int r = 0; r <= reps; ++r) {
          const auto t0 = Clock::now();
          if (g.rank() == i) {
            DZ_RETURN_IF_ERROR(g.send(t, peer, 9));
            DZ_RETURN_IF_ERROR(g.recv(t, peer, 9));
          } else {
            DZ_RETURN_IF_ERROR(g.recv(t, peer, 9));
            DZ_RETURN_IF_ERROR(g.send(t, peer, 9));
          }
          if (r > 0) best = std::min(best, since(t0));
        }
      }
      DZ_ASSIGN_OR_RETURN(const double worst, slowest(g, best));
      out.push_back(figure(2 * t.numel() * 4, worst, 1.0));
    }
  return out;
}

}  // namespace dayzero::preflight
