// Streaming loads: read coalesced byte ranges chunk by chunk, hash, convert to f32, count NaN/Inf.
// The reads and the hash stay on the calling thread (one reader, one hash state, file order);
// helper threads fault in destination pages ahead of the reads and convert/scan behind them.
#include "checkpoint/load.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "checkpoint/xxhash.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and prefaulting stops
#endif

namespace dayzero::checkpoint {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

Result<const TensorInfo*> find_numeric(const Catalog& catalog, const std::string& name) {
  const TensorInfo* t = catalog.find(name);
  if (!t) return Status::NotFound(catalog.dir() + ": tensor '" + name + "' not found in the checkpoint");
  if (!dtype_is_numeric(t->dtype)) {
    return Status::Unsupported(t->file + ": tensor '" + name + "': dtype " + dtype_name(t->dtype) +
                               " cannot be converted to F32");
  }
  return t;
}

void add_range(Ranges& ranges, uint64_t offset, uint64_t len) {
  if (len == 0) return;
  if (!ranges.empty() && ranges.back().first + ranges.back().second == offset) {
    ranges.back().second += len;
  } else {
    ranges.emplace_back(offset, len);
  }
}

// One read call: len bytes at file offset `offset`.
struct Piece {
  uint64_t offset, len;
};
// Consecutive pieces that land contiguously in one buffer, hashed as one run of bytes.
struct Chunk {
  size_t first_piece = 0, n_pieces = 0;
  uint64_t bytes = 0;  // on-disk bytes
  uint64_t elem0 = 0;  // index of its first element in the result
};

struct Counts {
  int64_t nan = 0, inf = 0;
};

// NaN and Inf by their exponent bits. Non-finite values are rare: a block whose largest
// magnitude bits are below Inf's is skipped after one max-reduction (two vector ops per
// vector), and only a block that holds one is counted exactly.
constexpr size_t kScanBlock = 4096;

Counts count_non_finite(const uint32_t* bits, size_t n) {
  Counts c;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t a = bits[j] & 0x7fffffffu;
    c.inf += a == 0x7f800000u;
    c.nan += a > 0x7f800000u;
  }
  return c;
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) uint32_t max_magnitude(
    const uint32_t* bits, size_t n) {
  uint32_t m = 0;
  for (size_t j = 0; j < n; ++j) m = std::max(m, bits[j] & 0x7fffffffu);
  return m;
}

Counts scan_f32(const uint32_t* bits, size_t n) {
  Counts c;
  for (size_t b = 0; b < n; b += kScanBlock) {
    const size_t len = std::min(kScanBlock, n - b);
    if (max_magnitude(bits + b, len) < 0x7f800000u) continue;
    const Counts k = count_non_finite(bits + b, len);
    c.nan += k.nan;
    c.inf += k.inf;
  }
  return c;
}

// BF16 widening (exact: a shift), returning the largest magnitude bits seen.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) uint16_t widen_bf16(
    const uint16_t* in, uint32_t* out, size_t n) {
  uint16_t m = 0;
  for (size_t j = 0; j < n; ++j) {
    out[j] = static_cast<uint32_t>(in[j]) << 16;
    m = std::max<uint16_t>(m, in[j] & 0x7fffu);
  }
  return m;
}

Counts widen_bf16_scan(const uint16_t* in, uint32_t* out, size_t n) {
  Counts c;
  for (size_t b = 0; b < n; b += kScanBlock) {
    const size_t len = std::min(kScanBlock, n - b);
    if (widen_bf16(in + b, out + b, len) < 0x7f80u) continue;
    const Counts k = count_non_finite(out + b, len);
    c.nan += k.nan;
    c.inf += k.inf;
  }
  return c;
}

// Converts (unless the bytes are already the result) and scans one chunk.
Counts finish_chunk(DType dtype, const uint8_t* src, float* dst, size_t count) {
  if (dtype == DType::kBF16) return widen_bf16_scan(reinterpret_cast<const uint16_t*>(src),
                                                    reinterpret_cast<uint32_t*>(dst), count);
  if (dtype != DType::kF32 || src != reinterpret_cast<const uint8_t*>(dst)) convert_to_f32(dtype, src, dst, count);
  return scan_f32(reinterpret_cast<const uint32_t*>(dst), count);
}

std::atomic<bool> g_populate_supported{true};

// Faults in the whole pages inside [p, p + len) without changing their contents, so that the
// thread that writes them next does not pay for first touch. Only an optimisation: failures
// are ignored (and an unsupported kernel turns it off).
void prefault(void* p, size_t len) {
  if (!g_populate_supported.load(std::memory_order_relaxed)) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + len) / page * page;
  if (e <= b) return;
  if (madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
    g_populate_supported.store(false, std::memory_order_relaxed);
}

size_t chunk_bytes_for(size_t staging_bytes, size_t esize) {
  return std::max(esize, std::min(kChunkBytes, staging_bytes / 2) / esize * esize);
}

}  // namespace

// One queued tensor. The fields above the mu-guarded ones are fixed once it is queued.
//
// Per chunk i: prefault P (destination pages, before the read of an F32 chunk or the
// conversion of another), read R (the calling thread only, in file order), hash H (in chunk
// order, one thread at a time, after R), finish F (convert and scan, after R). A staging slot
// is released once its chunk is hashed and finished.
struct Job {
  DType dtype = DType::kF32;
  size_t esize = 4;
  bool direct = false;  // F32 on disk: read straight into the result
  std::vector<Piece> pieces;
  std::vector<Chunk> chunks;
  Tensor out;
  uint8_t* out_bytes = nullptr;
  WeightRecord rec;  // all but checksum and counts once queued

  // Guarded by Loader::Impl::mu (hash: by `hashing`, handed over under mu).
  enum : uint8_t { kClaimed = 1, kPrefaulted = 2, kRead = 4, kHashed = 8, kFinished = 16 };
  std::vector<uint8_t> state;    // per chunk
  std::vector<uint8_t*> src;     // per chunk: where its bytes are read to (staged: a slot)
  std::vector<int> slot;         // per chunk: its staging slot, -1 when none
  size_t next_prefault = 0;      // first chunk a helper may still claim for prefaulting
  size_t next_hash = 0;          // chunks before it are hashed
  bool hashing = false;          // a thread is hashing chunk next_hash
  std::deque<size_t> ready;      // read, waiting to be converted and scanned
  size_t finished = 0;
  int in_flight = 0;  // tasks running on this job, on any thread
  Xxh64 hash;
  Counts counts;

  uint8_t* dst_of(size_t i) const { return out_bytes + chunks[i].elem0 * 4; }
  size_t count_of(size_t i) const { return chunks[i].bytes / esize; }
  size_t n() const { return state.size(); }
  bool can_hash() const { return !hashing && next_hash < n() && (state[next_hash] & kRead); }
  bool can_prefault() const { return next_prefault < n(); }
  bool done() const { return next_hash == n() && finished == n(); }
};

struct Loader::Impl {
  int threads = 1;
  size_t staging_bytes = kDefaultStagingBytes;

  // The staging ring: allocated on first use, kept. busy[s]: slot s holds a chunk not yet
  // hashed and finished.
  std::vector<std::unique_ptr<uint8_t[]>> ring;
  std::vector<bool> busy;
  size_t ring_next = 0;

  mutable std::mutex mu;
  std::condition_variable work_cv;  // helpers wait for work
  std::condition_variable done_cv;  // the caller waits for tasks to end
  bool stop = false;
  std::deque<std::unique_ptr<Job>> jobs;  // queued, oldest first
  std::vector<std::thread> helpers;

  // Every staged dtype's chunk fits: chunk_bytes_for is at most this for esize <= 8.
  size_t slot_bytes() const { return std::max<size_t>(8, std::min(kChunkBytes, staging_bytes / 2)); }
  size_t ring_slots() const {
    return helpers.empty() ? 1 : std::clamp<size_t>(staging_bytes / slot_bytes(), 1, 4);
  }

  // A chunk of the newest job a helper may prefault, claimed; or null. REQUIRES: mu held.
  Job* claim_prefault(size_t* i) {
    if (jobs.empty()) return nullptr;
    Job& j = *jobs.back();
    while (j.next_prefault < j.n()) {
      const size_t k = j.next_prefault++;
      if (!(j.state[k] & Job::kClaimed)) {
        j.state[k] |= Job::kClaimed;
        *i = k;
        return &j;
      }
    }
    return nullptr;
  }

  // Releases chunk i's staging slot once it is hashed and finished. REQUIRES: mu held.
  void maybe_release(Job& j, size_t i) {
    constexpr uint8_t kDone = Job::kHashed | Job::kFinished;
    if ((j.state[i] & kDone) == kDone && j.slot[i] >= 0) {
      busy[j.slot[i]] = false;
      j.slot[i] = -1;
    }
  }

  bool has_task(bool may_prefault) const {
    for (const auto& j : jobs)
      if (j->can_hash() || !j->ready.empty()) return true;
    return may_prefault && !jobs.empty() && jobs.back()->can_prefault();
  }

  // Each runs one task of its kind on this thread, or returns false when there is none.
  // REQUIRES: lk holds mu; released while the task runs.
  bool hash_one(Job& j, std::unique_lock<std::mutex>& lk) {
    if (!j.can_hash()) return false;
    const size_t i = j.next_hash;
    j.hashing = true;
    ++j.in_flight;
    lk.unlock();
    j.hash.update(j.src[i], j.chunks[i].bytes);
    lk.lock();
    --j.in_flight;
    j.hashing = false;
    j.state[i] |= Job::kHashed;
    ++j.next_hash;
    maybe_release(j, i);
    return true;
  }
  bool hash_any(std::unique_lock<std::mutex>& lk) {  // the oldest job's chain first
    for (auto& j : jobs)
      if (hash_one(*j, lk)) return true;
    return false;
  }
  bool finish_any(std::unique_lock<std::mutex>& lk) {
    for (auto& jp : jobs) {
      Job& j = *jp;
      if (j.ready.empty()) continue;
      const size_t i = j.ready.front();
      j.ready.pop_front();
      ++j.in_flight;
      lk.unlock();
      const Counts c = finish_chunk(j.dtype, j.src[i], reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      lk.lock();
      --j.in_flight;
      j.counts.nan += c.nan;
      j.counts.inf += c.inf;
      j.state[i] |= Job::kFinished;
      ++j.finished;
      maybe_release(j, i);
      return true;
    }
    return false;
  }
  bool prefault_one(std::unique_lock<std::mutex>& lk) {
    size_t i;
    Job* j = claim_prefault(&i);
    if (!j) return false;
    ++j->in_flight;
    lk.unlock();
    prefault(j->dst_of(i), j->count_of(i) * 4);
    lk.lock();
    --j->in_flight;
    j->state[i] |= Job::kPrefaulted;
    return true;
  }

  void helper_loop() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] { return stop || has_task(true); });
      if (stop) return;
      // Helpers take what the reading thread should not: first touch of the destination ahead
      // of the reads, then conversions; a hash only when the reader has fallen behind on it.
      if (!prefault_one(lk) && !finish_any(lk)) hash_any(lk);
      done_cv.notify_all();
    }
  }

  // The caller's wait for `until`: it runs tasks itself rather than sleep while there are any.
  template <class Pred>
  void help_until(std::unique_lock<std::mutex>& lk, Pred until) {
    while (!until()) {
      if (!hash_any(lk) && !finish_any(lk)) done_cv.wait(lk);
    }
  }

  Status submit(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader);
  Tensor next(WeightRecord* rec);
};

Status Loader::Impl::submit(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader) {
  auto job = std::make_unique<Job>();
  Job& j = *job;
  j.dtype = t.dtype;
  j.esize = dtype_size(t.dtype);
  j.direct = t.dtype == DType::kF32;
  const size_t chunk = chunk_bytes_for(staging_bytes, j.esize);
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  // Pieces of at most one chunk, grouped in file order into chunks (rows of a column slice are
  // many small pieces of one chunk).
  for (const auto& [offset, len] : ranges) {
    for (uint64_t pos = 0; pos < len;) {
      if (j.chunks.empty() || j.chunks.back().bytes == chunk) {
        Chunk c;
        c.first_piece = j.pieces.size();
        c.elem0 = j.chunks.empty() ? 0 : j.chunks.back().elem0 + j.chunks.back().bytes / j.esize;
        j.chunks.push_back(c);
      }
      Chunk& c = j.chunks.back();
      const uint64_t n = std::min<uint64_t>(chunk - c.bytes, len - pos);
      j.pieces.push_back({offset + pos, n});
      ++c.n_pieces;
      c.bytes += n;
      pos += n;
    }
  }
  const size_t n = j.chunks.size();
  j.state.assign(n, 0);
  j.src.assign(n, nullptr);
  j.slot.assign(n, -1);
  try {
    j.out = Tensor::host_uninitialized(DType::kF32, shape);
    if (!j.direct && n > 0 && ring.empty()) {
      for (size_t s = ring_slots(); s > 0; --s) ring.emplace_back(new (std::align_val_t(64)) uint8_t[slot_bytes()]);
      busy.assign(ring.size(), false);
    }
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(t.file + ": tensor '" + t.name + "': cannot allocate " +
                               std::to_string(shape_numel(shape) * 4) + " bytes of F32");
  }
  j.out_bytes = static_cast<uint8_t*>(j.out.data());
  for (size_t i = 0; i < n && j.direct; ++i) j.src[i] = j.dst_of(i);
  j.rec.name = t.name;
  j.rec.file = t.file;
  j.rec.dtype = t.dtype;
  j.rec.shape = std::move(shape);
  j.rec.ranges = ranges;
  j.rec.bytes_read = total;

  const uint64_t reads_before = reader.reads();
  const auto read_chunk = [&](size_t i) -> Status {
    uint8_t* buf = j.src[i];
    for (size_t p = j.chunks[i].first_piece; p < j.chunks[i].first_piece + j.chunks[i].n_pieces; ++p) {
      DZ_RETURN_IF_ERROR_CTX(reader.read(t.file, j.pieces[p].offset, j.pieces[p].len, buf),
                             "tensor '" + t.name + "'");
      buf += j.pieces[p].len;
    }
    return Status::Ok();
  };

  if (helpers.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (!j.direct) j.src[i] = ring[0].get();
      DZ_RETURN_IF_ERROR(read_chunk(i));
      j.hash.update(j.src[i], j.chunks[i].bytes);
      const Counts c = finish_chunk(j.dtype, j.src[i], reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      j.counts.nan += c.nan;
      j.counts.inf += c.inf;
    }
    j.next_hash = j.finished = n;
    j.rec.reads = reader.reads() - reads_before;
    std::lock_guard<std::mutex> lk(mu);
    jobs.push_back(std::move(job));
    return Status::Ok();
  }

  std::unique_lock<std::mutex> lk(mu);
  jobs.push_back(std::move(job));
  work_cv.notify_all();
  Status failed;
  for (size_t i = 0; i < n && failed.ok(); ++i) {
    if (j.direct) {
      // The read writes the result itself: let a helper's prefault in progress end, and take
      // the chunk so that no helper starts one.
      help_until(lk, [&] { return !(j.state[i] & Job::kClaimed) || (j.state[i] & Job::kPrefaulted); });
      j.state[i] |= Job::kClaimed;
    } else {
      const size_t s = ring_next;
      help_until(lk, [&] { return !busy[s]; });
      busy[s] = true;
      ring_next = (s + 1) % ring.size();
      j.slot[i] = static_cast<int>(s);
      j.src[i] = ring[s].get();
    }
    lk.unlock();
    failed = read_chunk(i);
    lk.lock();
    if (failed.ok()) {
      j.state[i] |= Job::kRead;
      j.ready.push_back(i);
      work_cv.notify_all();
      // The chunk is in this core's cache now: hash it here when the chain has reached it.
      if (j.next_hash == i) hash_one(j, lk);
    }
  }
  j.rec.reads = reader.reads() - reads_before;
  if (failed.ok()) return Status::Ok();
  // Nothing more of this tensor is hashed, converted or prefaulted; its tasks in progress
  // end before its buffers go.
  j.ready.clear();
  j.next_prefault = n;
  help_until(lk, [&] { return j.in_flight == 0; });
  for (size_t i = 0; i < n; ++i)
    if (j.slot[i] >= 0) busy[j.slot[i]] = false;
  jobs.erase(std::find_if(jobs.begin(), jobs.end(), [&](const auto& p) { return p.get() == &j; }));
  return failed;
}

Tensor Loader::Impl::next(WeightRecord* rec) {
  std::unique_lock<std::mutex> lk(mu);
  DZ_CHECK(!jobs.empty(), "Loader::next with nothing queued");
  Job& j = *jobs.front();
  help_until(lk, [&] { return j.done(); });
  j.next_prefault = j.n();
  help_until(lk, [&] { return j.in_flight == 0; });
  std::unique_ptr<Job> job = std::move(jobs.front());
  jobs.pop_front();
  lk.unlock();
  if (rec) {
    *rec = std::move(j.rec);
    rec->checksum = j.hash.digest();
    rec->nan_count = j.counts.nan;
    rec->inf_count = j.counts.inf;
  }
  return std::move(j.out);
}

Loader::Loader(int threads, size_t staging_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->threads = std::max(1, threads);
  impl_->staging_bytes = staging_bytes;
  for (int i = 1; i < impl_->threads; ++i) impl_->helpers.emplace_back([this] { impl_->helper_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  for (auto& h : impl_->helpers) h.join();
}

int Loader::threads() const { return impl_->threads; }

size_t Loader::pending() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->jobs.size();
}

Tensor Loader::next(WeightRecord* rec) { return impl_->next(rec); }

Status Loader::submit(const Catalog& catalog, const std::string& name, ByteReader& reader, int dim, int64_t begin,
                      int64_t end) {
  DZ_ASSIGN_OR_RETURN(const TensorInfo* t, find_numeric(catalog, name));
  Ranges ranges;
  if (dim == -1) {
    add_range(ranges, t->offset, t->nbytes);
    return impl_->submit(*t, t->shape, ranges, reader);
  }
  const std::string where = t->file + ": tensor '" + name + "' " + shape_str(t->shape);
  if (dim != 0 && dim != 1) {
    return Status::InvalidArgument(where + ": can only slice dim 0 or 1, not " + std::to_string(dim));
  }
  if (dim == 1 && t->shape.size() != 2)
    return Status::InvalidArgument(where + ": dim 1 slices need a 2-D tensor");
  if (t->shape.empty()) return Status::InvalidArgument(where + ": cannot slice a scalar");
  if (begin < 0 || begin > end || end > t->shape[dim]) {
    return Status::InvalidArgument(where + ": slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                   ") of dim " + std::to_string(dim) + " is out of range");
  }
  Shape shape = t->shape;
  shape[dim] = end - begin;
  const uint64_t esize = dtype_size(t->dtype);
  if (dim == 0) {
    const uint64_t row_bytes = t->shape[0] ? t->nbytes / t->shape[0] : 0;
    add_range(ranges, t->offset + begin * row_bytes, (end - begin) * row_bytes);
  } else {
    const uint64_t row_bytes = t->shape[1] * esize;
    for (int64_t r = 0; r < t->shape[0]; ++r) {
      add_range(ranges, t->offset + r * row_bytes + begin * esize, (end - begin) * esize);
    }
  }
  return impl_->submit(*t, std::move(shape), ranges, reader);
}

Result<Tensor> Loader::load(const Catalog& catalog, const std::string& name, ByteReader& reader, WeightRecord* rec) {
  DZ_CHECK(pending() == 0, "Loader::load with tensors queued");
  DZ_RETURN_IF_ERROR(submit(catalog, name, reader));
  return next(rec);
}

Result<Tensor> Loader::load_slice(const Catalog& catalog, const std::string& name, int dim, int64_t begin, int64_t end,
                                  ByteReader& reader, WeightRecord* rec) {
  DZ_CHECK(pending() == 0, "Loader::load_slice with tensors queued");
  if (dim == -1) {
    const TensorInfo* t = catalog.find(name);
    return Status::InvalidArgument((t ? t->file : catalog.dir()) + ": tensor '" + name +
                                   "': can only slice dim 0 or 1, not -1");
  }
  DZ_RETURN_IF_ERROR(submit(catalog, name, reader, dim, begin, end));
  return next(rec);
}

namespace {

// The calling thread's inline loader, kept so that its staging slot is faulted in once.
Loader& inline_loader(size_t staging_bytes) {
  thread_local std::unique_ptr<Loader> loader;
  thread_local size_t loader_staging = 0;
  if (!loader || loader_staging != staging_bytes) {
    loader = std::make_unique<Loader>(1, staging_bytes);
    loader_staging = staging_bytes;
  }
  return *loader;
}

}  // namespace

Result<Tensor> load_f32(const Catalog& catalog, const std::string& name, ByteReader& reader, WeightRecord* rec,
                        size_t staging_bytes) {
  return inline_loader(staging_bytes).load(catalog, name, reader, rec);
}

Result<Tensor> load_slice_f32(const Catalog& catalog, const std::string& name, int dim, int64_t begin,
                              int64_t end, ByteReader& reader, WeightRecord* rec, size_t staging_bytes) {
  return inline_loader(staging_bytes).load_slice(catalog, name, dim, begin, end, reader, rec);
}

}  // namespace dayzero::checkpoint
