// Streaming loads: read coalesced byte ranges chunk by chunk, hash, convert to f32, count NaN/Inf.
// Every thread of a Loader takes whole chunks (read, first touch of the destination, convert,
// scan, all in its own cache); only the XXH64 state, which must see the chunks in file order,
// passes from thread to thread.
#include "checkpoint/load.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "checkpoint/xxhash.h"

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

uint32_t max_magnitude(const uint32_t* bits, size_t n) {
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
uint16_t widen_bf16(const uint16_t* in, uint32_t* out, size_t n) {
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

// NaN and Inf of 16-bit floats kept as stored, by their bits (inf: the magnitude bits of
// infinity, 0x7f80 for BF16, 0x7c00 for F16): the same counts as in their f32 widening.
Counts scan_16(const uint16_t* bits, size_t n, uint16_t inf) {
  Counts c;
  for (size_t b = 0; b < n; b += kScanBlock) {
    const size_t len = std::min(kScanBlock, n - b);
    uint16_t m = 0;
    for (size_t j = 0; j < len; ++j) m = std::max<uint16_t>(m, bits[b + j] & 0x7fffu);
    if (m < inf) continue;
    for (size_t j = 0; j < len; ++j) {
      const uint16_t a = bits[b + j] & 0x7fffu;
      c.inf += a == inf;
      c.nan += a > inf;
    }
  }
  return c;
}

// Whether a tensor of this on-disk dtype is handed over as stored when the loader keeps floats so.
bool keepable_as_stored(DType d) { return d == DType::kBF16 || d == DType::kF16; }

// Converts (unless the bytes are already the result) and scans one chunk. out: the result's
// dtype, F32 or (kept as stored) the on-disk dtype, whose bytes are then the result as read.
Counts finish_chunk(DType dtype, DType out, const uint8_t* src, float* dst, size_t count) {
  if (out != DType::kF32)
    return scan_16(reinterpret_cast<const uint16_t*>(src), count, dtype == DType::kBF16 ? 0x7f80u : 0x7c00u);
  if (dtype == DType::kBF16) return widen_bf16_scan(reinterpret_cast<const uint16_t*>(src),
                                                    reinterpret_cast<uint32_t*>(dst), count);
  if (dtype != DType::kF32 || src != reinterpret_cast<const uint8_t*>(dst)) convert_to_f32(dtype, src, dst, count);
  return scan_f32(reinterpret_cast<const uint32_t*>(dst), count);
}

size_t chunk_bytes_for(size_t staging_bytes, size_t esize) {
  return std::max(esize, std::min(kChunkBytes, staging_bytes / 2) / esize * esize);
}

}  // namespace

// One queued tensor. The fields above the mu-guarded ones are fixed once it is queued.
//
// A thread claims the next chunk, reads it (into the result for F32, else into its own
// staging slot), faulting in the destination as it goes, hashes it when the hash state has
// reached it (else converts and scans it first, then waits for the state), and converts and
// scans it. The first read error stops the job: unclaimed chunks stay unread, and waiting
// threads give up the hash.
struct Job {
  DType dtype = DType::kF32;
  size_t esize = 4;
  DType out_dtype = DType::kF32;  // the result's: F32, or the on-disk BF16/F16 kept as stored
  size_t out_esize = 4;
  bool direct = false;  // F32 on disk, or kept as stored: read straight into the result
  std::vector<Piece> pieces;
  std::vector<Chunk> chunks;
  Tensor out;
  uint8_t* out_bytes = nullptr;
  WeightRecord rec;  // all but checksum and counts once queued

  // Guarded by Loader::Impl::mu (hash: owned by the thread whose chunk is next_hash).
  size_t next_claim = 0;  // chunks before it are taken
  size_t next_hash = 0;   // chunks before it are hashed
  size_t done = 0;        // chunks fully processed (or given up after an error)
  int in_flight = 0;      // threads working on a chunk of this job
  Status error;
  Xxh64 hash;
  Counts counts;

  uint8_t* dst_of(size_t i) const { return out_bytes + chunks[i].elem0 * out_esize; }
  size_t count_of(size_t i) const { return chunks[i].bytes / esize; }
  size_t n() const { return chunks.size(); }
  bool claimable() const { return next_claim < n() && error.ok(); }
  bool complete() const { return in_flight == 0 && (done == n() || (!error.ok() && done == next_claim)); }
};

struct Loader::Impl {
  int threads = 1;
  size_t staging_bytes = kDefaultStagingBytes;
  HostArena* arena = nullptr;  // where results go (place_results_in); null: one allocation each
  bool keep_stored_float = false;  // set_keep_stored_float
  // One staging slot per thread (the caller's is [0]): allocated on first use, kept.
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, Free>> slots;

  mutable std::mutex mu;
  std::condition_variable work_cv;   // helpers wait for chunks to claim
  std::condition_variable chain_cv;  // the hash moved on, or a job completed
  bool stop = false;
  std::deque<std::unique_ptr<Job>> jobs;  // queued, oldest first
  std::vector<std::thread> helpers;

  // Every staged dtype's chunk fits: chunk_bytes_for is at most this for esize <= 8.
  size_t slot_bytes() const { return std::max<size_t>(8, std::min(kChunkBytes, staging_bytes / 2)); }
  uint8_t* slot(int worker) {
    std::lock_guard<std::mutex> lk(slot_mu);
    if (slots.empty()) slots.resize(threads);
    if (!slots[worker]) {
      auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (slot_bytes() + 63) / 64 * 64));
      if (!p) throw std::bad_alloc();
      slots[worker].reset(p);
    }
    return slots[worker].get();
  }
  std::mutex slot_mu;

  Job* claimable_job() {
    for (auto& j : jobs)
      if (j->claimable()) return j.get();
    return nullptr;
  }

  // Processes one claimed chunk i of j with `reader` on worker `worker`'s slot.
  // REQUIRES: lk holds mu; released while reading, converting and hashing.
  void process(Job& j, size_t i, ByteReader& reader, int worker, std::unique_lock<std::mutex>& lk) {
    ++j.in_flight;
    lk.unlock();
    uint8_t* src = nullptr;
    Status st;
    try {
      src = j.direct ? j.dst_of(i) : slot(worker);
    } catch (const std::bad_alloc&) {
      st = Status::OutOfMemory(j.rec.file + ": tensor '" + j.rec.name + "': cannot allocate " +
                               std::to_string(slot_bytes()) + " bytes of staging");
    }
    uint8_t* buf = src;
    for (size_t p = j.chunks[i].first_piece; st.ok() && p < j.chunks[i].first_piece + j.chunks[i].n_pieces; ++p) {
      st = reader.read(j.rec.file, j.pieces[p].offset, j.pieces[p].len, buf).with_context("tensor '" + j.rec.name + "'");
      buf += j.pieces[p].len;
    }
    lk.lock();
    if (!st.ok()) {
      if (j.error.ok()) j.error = st;
      ++j.done;
      --j.in_flight;
      chain_cv.notify_all();
      return;
    }
    Counts c;
    bool finished = false;
    if (j.next_hash != i) {
      // Earlier chunks are still being read or hashed: convert and scan meanwhile.
      lk.unlock();
      c = finish_chunk(j.dtype, j.out_dtype, src, reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      finished = true;
      lk.lock();
      chain_cv.wait(lk, [&] { return j.next_hash == i || !j.error.ok(); });
    }
    if (j.next_hash == i) {
      lk.unlock();
      j.hash.update(src, j.chunks[i].bytes);
      lk.lock();
      ++j.next_hash;
      chain_cv.notify_all();
    }
    if (!finished) {
      lk.unlock();
      c = finish_chunk(j.dtype, j.out_dtype, src, reinterpret_cast<float*>(j.dst_of(i)), j.count_of(i));
      lk.lock();
    }
    j.counts.nan += c.nan;
    j.counts.inf += c.inf;
    ++j.done;
    --j.in_flight;
    if (j.complete()) chain_cv.notify_all();
  }

  void helper_loop(int worker) {
    ByteReader reader;  // its own descriptors, opened and checked as the caller's are
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] { return stop || claimable_job(); });
      if (stop) return;
      Job& j = *claimable_job();
      process(j, j.next_claim++, reader, worker, lk);
    }
  }

  Status submit(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader);
  Result<Tensor> next(WeightRecord* rec);
};

Status read_recorded(ByteReader& reader, const TensorInfo& t, uint64_t offset, uint64_t len, void* dst,
                     WeightRecord* rec, Xxh64* hash) {
  if (len == 0) return Status::Ok();
  DZ_RETURN_IF_ERROR(reader.read(t.file, t.offset + offset, len, dst));
  if (rec) {
    auto& r = rec->ranges;
    if (!r.empty() && r.back().first + r.back().second == t.offset + offset) r.back().second += len;
    else r.emplace_back(t.offset + offset, len);
    rec->bytes_read += len;
    ++rec->reads;
  }
  if (hash) hash->update(dst, static_cast<size_t>(len));
  return Status::Ok();
}

Status Loader::Impl::submit(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader) {
  auto job = std::make_unique<Job>();
  Job& j = *job;
  j.dtype = t.dtype;
  j.esize = dtype_size(t.dtype);
  if (keep_stored_float && keepable_as_stored(t.dtype)) {
    j.out_dtype = t.dtype;
    j.out_esize = j.esize;
  }
  j.direct = t.dtype == DType::kF32 || j.out_dtype != DType::kF32;
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
  try {
    j.out = arena ? arena->take(j.out_dtype, shape) : Tensor::host_uninitialized(j.out_dtype, shape);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(t.file + ": tensor '" + t.name + "': cannot allocate " +
                               std::to_string(shape_numel(shape) * j.out_esize) + " bytes of " +
                               dtype_name(j.out_dtype));
  }
  j.out_bytes = static_cast<uint8_t*>(j.out.data());
  j.rec.name = t.name;
  j.rec.file = t.file;
  j.rec.dtype = t.dtype;
  j.rec.shape = std::move(shape);
  j.rec.ranges = ranges;
  j.rec.bytes_read = total;
  j.rec.reads = j.pieces.size();  // one read call per piece, whichever thread issues it

  std::unique_lock<std::mutex> lk(mu);
  jobs.push_back(std::move(job));
  work_cv.notify_all();
  // The caller takes chunks too, until none is left to claim; helpers may still be finishing
  // theirs when this returns.
  while (j.claimable()) process(j, j.next_claim++, reader, 0, lk);
  if (j.error.ok()) return Status::Ok();
  chain_cv.wait(lk, [&] { return j.complete(); });
  Status failed = j.error;
  jobs.erase(std::find_if(jobs.begin(), jobs.end(), [&](const auto& p) { return p.get() == &j; }));
  return failed;
}

Result<Tensor> Loader::Impl::next(WeightRecord* rec) {
  std::unique_lock<std::mutex> lk(mu);
  DZ_CHECK(!jobs.empty(), "Loader::next with nothing queued");
  Job& j = *jobs.front();
  // Helpers may still hold chunks of it; the caller helps with later queued tensors meanwhile.
  chain_cv.wait(lk, [&] { return j.complete(); });
  std::unique_ptr<Job> job = std::move(jobs.front());
  jobs.pop_front();
  lk.unlock();
  if (!j.error.ok()) return j.error;
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
  for (int i = 1; i < impl_->threads; ++i) impl_->helpers.emplace_back([this, i] { impl_->helper_loop(i); });
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

void Loader::place_results_in(HostArena* arena) { impl_->arena = arena; }
void Loader::set_keep_stored_float(bool on) { impl_->keep_stored_float = on; }

size_t Loader::pending() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->jobs.size();
}

Result<Tensor> Loader::next(WeightRecord* rec) { return impl_->next(rec); }

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

Status Loader::submit_rows(const Catalog& catalog, const std::string& name, ByteReader& reader,
                           const std::vector<std::pair<int64_t, int64_t>>& rows) {
  DZ_ASSIGN_OR_RETURN(const TensorInfo* t, find_numeric(catalog, name));
  const std::string where = t->file + ": tensor '" + name + "' " + shape_str(t->shape);
  if (t->shape.empty()) return Status::InvalidArgument(where + ": cannot slice a scalar");
  const uint64_t row_bytes = t->shape[0] ? t->nbytes / t->shape[0] : 0;
  Ranges ranges;
  int64_t n = 0;
  for (const auto& [begin, end] : rows) {
    if (begin < 0 || begin > end || end > t->shape[0])
      return Status::InvalidArgument(where + ": rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") are out of range");
    add_range(ranges, t->offset + begin * row_bytes, (end - begin) * row_bytes);
    n += end - begin;
  }
  Shape shape = t->shape;
  shape[0] = n;
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
