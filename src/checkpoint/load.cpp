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

// NaN and Inf by their exponent bits: integer compares the compiler vectorises.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) Counts scan_f32(const uint32_t* bits, size_t n) {
  int64_t non_finite = 0, infinite = 0;
  for (size_t j = 0; j < n; ++j) {
    non_finite += (bits[j] & 0x7f800000u) == 0x7f800000u;
    infinite += (bits[j] & 0x7fffffffu) == 0x7f800000u;
  }
  return {non_finite - infinite, infinite};
}

// BF16 widening (exact: a shift) fused with the scan of the widened bits.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) Counts widen_bf16_scan(const uint16_t* in,
                                                                                     uint32_t* out, size_t n) {
  int64_t non_finite = 0, infinite = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t v = static_cast<uint32_t>(in[j]) << 16;
    out[j] = v;
    non_finite += (v & 0x7f800000u) == 0x7f800000u;
    infinite += (v & 0x7fffffffu) == 0x7f800000u;
  }
  return {non_finite - infinite, infinite};
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

// One tensor in flight. The fields above the mu-guarded ones are fixed for the job.
//
// Per chunk i: prefault P (destination pages, before the read of an F32 chunk or the
// conversion of another), read R (the calling thread only, in file order), hash H (in chunk
// order, one thread at a time, after R), finish F (convert and scan, after R). A staging slot
// is reused once its chunk is hashed and finished.
struct Job {
  DType dtype = DType::kF32;
  size_t esize = 4;
  bool direct = false;  // F32 on disk: read straight into the result
  const std::vector<Chunk>* chunks = nullptr;
  uint8_t* out = nullptr;  // the result's bytes (f32)
  uint8_t* const* slots = nullptr;
  size_t n_slots = 0;

  // Guarded by Loader::Impl::mu (hash: by `hashing`, handed over under mu).
  enum : uint8_t { kClaimed = 1, kPrefaulted = 2, kRead = 4, kHashed = 8, kFinished = 16 };
  std::vector<uint8_t> state;  // per chunk
  size_t next_prefault = 0;    // first chunk a helper may still claim for prefaulting
  size_t next_hash = 0;        // chunks before it are hashed
  bool hashing = false;        // a thread is hashing chunk next_hash
  std::deque<size_t> ready;    // read, waiting to be converted and scanned
  size_t finished = 0;
  int in_flight = 0;  // helper tasks running on this job
  Xxh64 hash;
  Counts counts;

  const uint8_t* src_of(size_t i) const { return direct ? dst_of(i) : slots[i % n_slots]; }
  uint8_t* dst_of(size_t i) const { return out + (*chunks)[i].elem0 * 4; }
  size_t count_of(size_t i) const { return (*chunks)[i].bytes / esize; }
  size_t n() const { return state.size(); }
  bool can_hash() const { return !hashing && next_hash < n() && (state[next_hash] & kRead); }
  bool done() const { return next_hash == n() && finished == n(); }
};

struct Loader::Impl {
  int threads = 1;
  size_t staging_bytes = kDefaultStagingBytes;
  std::vector<std::unique_ptr<uint8_t[]>> slot_storage;  // grown on demand, kept across tensors
  size_t slot_bytes = 0;

  std::mutex mu;
  std::condition_variable work_cv;  // helpers wait for work
  std::condition_variable done_cv;  // the caller waits for helpers
  bool stop = false;
  Job* job = nullptr;
  std::vector<std::thread> helpers;

  // Slots of at least `bytes` each; the first `n` are returned in `out`.
  void staging(size_t n, size_t bytes, std::vector<uint8_t*>& out) {
    if (bytes > slot_bytes) {
      slot_storage.clear();
      slot_bytes = bytes;
    }
    while (slot_storage.size() < n) slot_storage.emplace_back(new (std::align_val_t(64)) uint8_t[slot_bytes]);
    out.clear();
    for (size_t i = 0; i < n; ++i) out.push_back(slot_storage[i].get());
  }

  // A chunk a helper may prefault, claimed; or false. REQUIRES: mu held.
  static bool claim_prefault(Job& j, size_t* i) {
    while (j.next_prefault < j.n()) {
      const size_t k = j.next_prefault++;
      if (!(j.state[k] & Job::kClaimed)) {
        j.state[k] |= Job::kClaimed;
        *i = k;
        return true;
      }
    }
    return false;
  }

  // Runs the most urgent task there is on this thread: the hash (the one sequential chain),
  // then a conversion, then (helpers only) a prefault. False when there was none.
  // REQUIRES: lk holds mu; released while the task runs.
  static bool run_task(Job& j, std::unique_lock<std::mutex>& lk, bool may_prefault) {
    size_t i;
    if (j.can_hash()) {
      i = j.next_hash;
      j.hashing = true;
      lk.unlock();
      j.hash.update(j.src_of(i), (*j.chunks)[i].bytes);
      lk.lock();
      j.hashing = false;
      j.state[i] |= Job::kHashed;
      ++j.next_hash;
    } else if (!j.ready.empty()) {
      i = j.ready.front();
      j.ready.pop_front();
      lk.unlock();
      const Counts c = finish_chunk(j.dtype, j.src_of(i), reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      lk.lock();
      j.counts.nan += c.nan;
      j.counts.inf += c.inf;
      j.state[i] |= Job::kFinished;
      ++j.finished;
    } else if (may_prefault && claim_prefault(j, &i)) {
      lk.unlock();
      prefault(j.dst_of(i), j.count_of(i) * 4);
      lk.lock();
      j.state[i] |= Job::kPrefaulted;
    } else {
      return false;
    }
    return true;
  }

  void helper_loop() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] {
        return stop || (job && (job->can_hash() || !job->ready.empty() || job->next_prefault < job->n()));
      });
      if (stop) return;
      Job& j = *job;
      ++j.in_flight;
      run_task(j, lk, true);
      --j.in_flight;
      done_cv.notify_all();
    }
  }

  // The caller's wait for `until`: it runs tasks itself rather than sleep while there are any.
  template <class Pred>
  void help_until(Job& j, std::unique_lock<std::mutex>& lk, Pred until) {
    while (!until()) {
      if (!run_task(j, lk, false)) done_cv.wait(lk);
    }
  }

  Result<Tensor> stream(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader,
                        WeightRecord* rec);
};

Result<Tensor> Loader::Impl::stream(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader,
                                    WeightRecord* rec) {
  const size_t esize = dtype_size(t.dtype);
  const size_t chunk = chunk_bytes_for(staging_bytes, esize);
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;

  // Pieces of at most one chunk, grouped in file order into chunks (rows of a column slice are
  // many small pieces of one chunk).
  std::vector<Piece> pieces;
  std::vector<Chunk> chunks;
  for (const auto& [offset, len] : ranges) {
    for (uint64_t pos = 0; pos < len;) {
      if (chunks.empty() || chunks.back().bytes == chunk) {
        Chunk c;
        c.first_piece = pieces.size();
        c.elem0 = chunks.empty() ? 0 : chunks.back().elem0 + chunks.back().bytes / esize;
        chunks.push_back(c);
      }
      Chunk& c = chunks.back();
      const uint64_t n = std::min<uint64_t>(chunk - c.bytes, len - pos);
      pieces.push_back({offset + pos, n});
      ++c.n_pieces;
      c.bytes += n;
      pos += n;
    }
  }

  Job j;
  j.dtype = t.dtype;
  j.esize = esize;
  j.direct = t.dtype == DType::kF32;
  j.chunks = &chunks;
  j.state.assign(chunks.size(), 0);
  Tensor out;
  std::vector<uint8_t*> slots;
  const bool helped = !helpers.empty() && !chunks.empty();
  try {
    out = Tensor::host_uninitialized(DType::kF32, shape);
    if (!j.direct && !chunks.empty()) {
      const size_t n = helped ? std::clamp<size_t>(staging_bytes / chunk, 1, 4) : 1;
      staging(std::min(n, chunks.size()), std::min<uint64_t>(chunk, total), slots);
    }
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(t.file + ": tensor '" + t.name + "': cannot allocate " +
                               std::to_string(shape_numel(shape) * 4) + " bytes of F32");
  }
  j.out = static_cast<uint8_t*>(out.data());
  j.slots = slots.data();
  j.n_slots = slots.size();

  const uint64_t reads_before = reader.reads();
  const auto read_chunk = [&](size_t i) -> Status {
    const Chunk& c = chunks[i];
    auto* buf = const_cast<uint8_t*>(j.src_of(i));
    for (size_t p = c.first_piece; p < c.first_piece + c.n_pieces; ++p) {
      DZ_RETURN_IF_ERROR_CTX(reader.read(t.file, pieces[p].offset, pieces[p].len, buf), "tensor '" + t.name + "'");
      buf += pieces[p].len;
    }
    return Status::Ok();
  };

  if (!helped) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      DZ_RETURN_IF_ERROR(read_chunk(i));
      j.hash.update(j.src_of(i), chunks[i].bytes);
      const Counts c = finish_chunk(j.dtype, j.src_of(i), reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      j.counts.nan += c.nan;
      j.counts.inf += c.inf;
    }
  } else {
    std::unique_lock<std::mutex> lk(mu);
    job = &j;
    work_cv.notify_all();
    Status failed;
    for (size_t i = 0; i < chunks.size() && failed.ok(); ++i) {
      if (j.direct) {
        // The read writes the result itself: let a helper's prefault in progress end, and take
        // the chunk so that no helper starts one.
        help_until(j, lk, [&] { return !(j.state[i] & Job::kClaimed) || (j.state[i] & Job::kPrefaulted); });
        j.state[i] |= Job::kClaimed;
      } else if (i >= j.n_slots) {
        const size_t prev = i - j.n_slots;  // the slot's previous chunk
        help_until(j, lk, [&] { return (j.state[prev] & (Job::kHashed | Job::kFinished)) ==
                                       (Job::kHashed | Job::kFinished); });
      }
      lk.unlock();
      failed = read_chunk(i);
      lk.lock();
      if (failed.ok()) {
        j.state[i] |= Job::kRead;
        j.ready.push_back(i);
        work_cv.notify_all();
      }
    }
    if (failed.ok()) help_until(j, lk, [&] { return j.done(); });
    // Nothing more to convert or prefault; tasks in progress end before the buffers go.
    j.ready.clear();
    j.next_prefault = j.n();
    j.next_hash = j.n();
    done_cv.wait(lk, [&] { return j.in_flight == 0; });
    job = nullptr;
    if (!failed.ok()) return failed;
  }
  if (rec) {
    *rec = WeightRecord{};
    rec->name = t.name;
    rec->file = t.file;
    rec->dtype = t.dtype;
    rec->shape = std::move(shape);
    rec->ranges = ranges;
    rec->bytes_read = total;
    rec->checksum = j.hash.digest();
    rec->nan_count = j.counts.nan;
    rec->inf_count = j.counts.inf;
    rec->reads = reader.reads() - reads_before;
  }
  return out;
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

Result<Tensor> Loader::load(const Catalog& catalog, const std::string& name, ByteReader& reader, WeightRecord* rec) {
  DZ_ASSIGN_OR_RETURN(const TensorInfo* t, find_numeric(catalog, name));
  Ranges ranges;
  add_range(ranges, t->offset, t->nbytes);
  return impl_->stream(*t, t->shape, ranges, reader, rec);
}

Result<Tensor> Loader::load_slice(const Catalog& catalog, const std::string& name, int dim, int64_t begin, int64_t end,
                                  ByteReader& reader, WeightRecord* rec) {
  DZ_ASSIGN_OR_RETURN(const TensorInfo* t, find_numeric(catalog, name));
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
  Ranges ranges;
  if (dim == 0) {
    const uint64_t row_bytes = t->shape[0] ? t->nbytes / t->shape[0] : 0;
    add_range(ranges, t->offset + begin * row_bytes, (end - begin) * row_bytes);
  } else {
    const uint64_t row_bytes = t->shape[1] * esize;
    for (int64_t r = 0; r < t->shape[0]; ++r) {
      add_range(ranges, t->offset + r * row_bytes + begin * esize, (end - begin) * esize);
    }
  }
  return impl_->stream(*t, std::move(shape), ranges, reader, rec);
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
