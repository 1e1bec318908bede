// One file of a verify, streamed (file_scan.h).
#include "verify/file_scan.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <mpi.h>

#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/xxhash.h"
#include "verify/progress.h"
#include "comm/mpi_env.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "model/model_folder.h"
#include "verify/expected_hashes.h"
#include "verify/sha256.h"

namespace dayzero::verify {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Per-tensor XXH64 and value scan over the blocks of a file, in file order.
class TensorWalker {
 public:
  TensorWalker(std::vector<TensorResult>& tensors, const ScanOptions& scan) : t_(tensors), scan_(scan) {}

  void feed(const uint8_t* data, uint64_t pos, size_t len) {
    const uint64_t end = pos + len;
    while (cur_ < t_.size()) {
      TensorResult& t = t_[cur_];
      const uint64_t t_end = t.offset + t.nbytes;
      if (t.offset > end || (t.offset == end && t.nbytes > 0)) break;
      const uint64_t lo = std::max(pos, t.offset), hi = std::min(end, t_end);
      if (hi > lo) {
        h_.update(data + (lo - pos), hi - lo);
        if (scan_.any()) scan(t, data + (lo - pos), hi - lo);
      }
      if (t_end > end) break;
      finish(t);
    }
  }
  // Tensors left (only empty ones can be at the very end).
  void flush() {
    while (cur_ < t_.size() && t_[cur_].nbytes == 0) finish(t_[cur_]);
  }

 private:
  void finish(TensorResult& t) {
    t.xxh64 = h_.digest();
    if (scan_.any()) t.all_zero = !nonzero_ && t.nbytes > 0;
    h_ = checkpoint::Xxh64();
    nonzero_ = false;
    carry_len_ = 0;
    ++cur_;
  }
  void scan(TensorResult& t, const uint8_t* p, size_t n) {
    const size_t es = dtype_size(t.dtype);
    if (carry_len_ > 0) {
      const size_t take = std::min(n, es - carry_len_);
      std::memcpy(carry_ + carry_len_, p, take);
      carry_len_ += take;
      p += take;
      n -= take;
      if (carry_len_ < es) return;
      scan_elems(t, carry_, 1);
      carry_len_ = 0;
    }
    const size_t whole = n / es;
    scan_elems(t, p, whole);
    carry_len_ = n - whole * es;
    std::memcpy(carry_, p + whole * es, carry_len_);
  }
  void scan_elems(TensorResult& t, const uint8_t* p, size_t n) {
    if (!dtype_is_float(t.dtype)) {
      if (!nonzero_)
        for (size_t i = 0; i < n * dtype_size(t.dtype); ++i)
          if (p[i]) {
            nonzero_ = true;
            break;
          }
      return;
    }
    const float limit = static_cast<float>(scan_.range_limit);
    constexpr size_t kChunk = 16384;
    float f[kChunk];
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t m = std::min(kChunk, n - i);
      convert_to_f32(t.dtype, p + i * dtype_size(t.dtype), f, m);
      int64_t nan = 0, inf = 0, big = 0, nz = 0;
      for (size_t k = 0; k < m; ++k) {
        const float v = f[k];
        nan += std::isnan(v);
        inf += std::isinf(v);
        big += std::isfinite(v) && std::fabs(v) > limit;
        nz += v != 0.0f;
      }
      t.nan += nan;
      t.inf += inf;
      t.out_of_range += big;
      nonzero_ = nonzero_ || nz > 0;
    }
  }

  std::vector<TensorResult>& t_;
  const ScanOptions& scan_;
  size_t cur_ = 0;
  checkpoint::Xxh64 h_;
  bool nonzero_ = false;
  uint8_t carry_[8];
  size_t carry_len_ = 0;
};

// Reads fd [0, size) in blocks on a reader thread (three buffers in flight) and hands each
// block to consume in order on this thread. Returns the read error, if any.
template <class F>
std::string stream_file(int fd, uint64_t size, size_t block, F&& consume) {
  constexpr int kBuffers = 3;
  // Kept across files (uninitialised, allocated once per block size): a fresh 48 MiB per small
  // shard would cost more than reading it.
  static thread_local std::vector<std::unique_ptr<uint8_t[]>> pool;
  static thread_local size_t bufs_block = 0;
  std::vector<std::unique_ptr<uint8_t[]>>& bufs = pool;  // the reader thread sees this thread's pool
  block = static_cast<size_t>(std::min<uint64_t>(block, std::max<uint64_t>(size, 1)));
  if (bufs.empty() || bufs_block < block) {
    bufs.clear();
    for (int i = 0; i < kBuffers; ++i) bufs.emplace_back(new uint8_t[block]);
    bufs_block = block;
  }
  std::vector<size_t> lens(kBuffers, 0);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> free_q = {0, 1, 2}, full_q;
  std::string error;
  bool done = false;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::thread reader([&] {
    for (uint64_t pos = 0; pos < size;) {
      int slot;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !free_q.empty(); });
        slot = free_q.back();
        free_q.pop_back();
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(block, size - pos));
      size_t got = 0;
      std::string err;
      while (got < want) {
        const ssize_t n = ::pread(fd, bufs[slot].get() + got, want - got, static_cast<off_t>(pos + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          err = std::string("read failed at byte ") + std::to_string(pos + got) + ": " + std::strerror(errno);
          break;
        }
        if (n == 0) {
          err = "file ends at byte " + std::to_string(pos + got) + ", shorter than its size at open (" +
                std::to_string(size) + ")";
          break;
        }
        got += static_cast<size_t>(n);
      }
      std::lock_guard<std::mutex> lk(mu);
      if (!err.empty()) {
        error = err;
        break;
      }
      lens[slot] = got;
      full_q.insert(full_q.begin(), slot);
      cv.notify_all();
      pos += got;
    }
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    cv.notify_all();
  });
  uint64_t pos = 0;
  for (;;) {
    int slot;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return !full_q.empty() || done; });
      if (full_q.empty()) break;
      slot = full_q.back();
      full_q.pop_back();
    }
    consume(bufs[slot].get(), pos, lens[slot]);
    pos += lens[slot];
    std::lock_guard<std::mutex> lk(mu);
    free_q.push_back(slot);
    cv.notify_all();
  }
  reader.join();
  return error;
}

}  // namespace

FileResult scan_file(const std::string& dir, const std::string& name, const VerifyOptions& o, VerifyProgress& progress) {
  FileResult r;
  r.name = name;
  const int64_t t0 = monotonic_ns();
  const std::string path = (fs::path(dir) / name).string();
  auto header = checkpoint::SafetensorsFile::open(path);
  if (header.ok()) {
    for (const auto& t : header->tensors())
      r.tensors.push_back({t.name, t.dtype, t.shape, t.offset, t.nbytes, 0, 0, 0, 0, false});
    std::sort(r.tensors.begin(), r.tensors.end(),
              [](const TensorResult& a, const TensorResult& b) { return a.offset < b.offset; });
  } else {
    r.header_error = header.status().message();
  }
  auto rf = open_regular_file(path);
  if (!rf.ok()) {
    r.read_error = rf.status().message();
    return r;
  }
  r.bytes = rf->size;
  if (!o.structure_only) {
    Sha256 sha;
    TensorWalker walker(r.tensors, o.scan);
    const bool walk = r.header_error.empty();
    const std::string err = stream_file(rf->fd, rf->size, o.block_bytes, [&](const uint8_t* d, uint64_t pos, size_t n) {
      sha.update(d, n);
      if (walk) walker.feed(d, pos, n);
      progress.add(n);
    });
    if (walk) walker.flush();
    if (err.empty()) r.sha256 = to_hex(sha.finish());
    else r.read_error = path + ": " + err;
  }
  ::close(rf->fd);
  r.seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
  return r;
}

}  // namespace dayzero::verify
