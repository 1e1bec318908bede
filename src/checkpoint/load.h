// Loading one tensor (or one rank's slice of it) from a catalogued checkpoint into a host F32
// tensor (or, when asked, a BF16/F16 one as stored), streaming in bounded chunks, with a
// record of exactly what was read.
// A Loader keeps its helper threads and staging across tensors; the free functions load on the
// calling thread alone. Not the shard-rule logic (which rank owns which slice): callers pass
// the slice bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/reader.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

// Caps the chunk a thread reads at once: half of this, and at most kChunkBytes, so that a
// chunk is still in cache when it is hashed and converted. Staging memory is one chunk per
// thread of the loader.
inline constexpr size_t kDefaultStagingBytes = 256ull << 20;
inline constexpr size_t kChunkBytes = 1ull << 20;

struct WeightRecord {
  std::string name, file;
  DType dtype = DType::kF32;                          // on-disk dtype
  Shape shape;                                        // of the slice loaded
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, len) on disk, coalesced, in read order
  uint64_t bytes_read = 0;                            // sum of range lengths
  uint64_t checksum = 0;                 // xxh64 (seed 0) of the on-disk bytes read, in read order
  int64_t nan_count = 0, inf_count = 0;  // in the values (as converted to f32, or kept as stored)
  uint64_t reads = 0;                    // read calls issued (a column slice costs one per row)
  // Bytes of companion tensors read with this one (an FP8 weight's scale_inv, fp8.h); they are
  // not in ranges, bytes_read, checksum or reads.
  uint64_t aux_bytes_read = 0;
};

class Xxh64;
// Reads `len` bytes at `offset` of tensor t's data into dst, counted into rec (its ranges, which
// coalesce, bytes_read and reads) and fed to hash; either may be null. The bookkeeping of the
// quantized formats' own readers (fp4.h, pack_quantized.h), whose records then say what was read.
Status read_recorded(ByteReader& reader, const TensorInfo& t, uint64_t offset, uint64_t len, void* dst,
                     WeightRecord* rec, Xxh64* hash);

// A reusable load pipeline. Every thread (the caller and threads - 1 helpers) takes whole
// chunks in turn: it reads one (one pread per coalesced range piece), which also gives the
// destination its first touch, and converts and NaN/Inf-scans it, all while the chunk is in its
// own cache; the XXH64 state, which must see the chunks in file order, passes from thread to
// thread. submit() returns once every chunk of the tensor is taken, so the caller starts on
// the next tensor while helpers end the last one. Results (values, checksum, counts, reads)
// are identical for any thread count. F32 on disk (and BF16/F16 kept as stored) is read
// straight into the result; other dtypes go through one staging slot per thread, allocated once and reused for every tensor
// (the shape a device loader's pinned staging takes). Helpers read through their own
// ByteReader (same open path and checks), so the caller's reader counts only its own reads.
// Not thread-safe: one caller at a time. Helper threads sleep when there is nothing to take.
class Loader {
 public:
  // threads: threads working on a tensor, the caller included; 1 (or less) starts no helper
  // thread and does everything inline. staging_bytes as for load_f32.
  explicit Loader(int threads = 1, size_t staging_bytes = kDefaultStagingBytes);
  ~Loader();  // joins the helper threads; tensors still queued are dropped
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int threads() const;
  // Tensors submitted from now on are placed in `arena` (null: each allocated on its own), which
  // must outlive the calls to next() that return them.
  void place_results_in(HostArena* arena);

  // Whether BF16 and F16 tensors are handed over in their stored dtype (the bytes as read,
  // shape as ever) instead of F32, for a backend that converts on its device
  // (Backend::wants_stored_dtype). The record is the same in both modes: the checksum of the
  // bytes read, NaN/Inf counted in the values. Other dtypes still become F32. Applies to
  // tensors submitted from then on; off by default.
  void set_keep_stored_float(bool on);

  // Queues tensor `name`, whole (dim -1) or the slice [begin, end) of dim 0 or 1 (as
  // load_slice_f32); the caller reads chunks of it until none is left to take. Errors: as
  // load_f32 / load_slice_f32; nothing is queued then, and tensors queued before stay queued.
  Status submit(const Catalog& catalog, const std::string& name, ByteReader& reader, int dim = -1,
                int64_t begin = 0, int64_t end = 0);
  // Queues the rows [begin, end) of every range of dim 0 of tensor `name`, concatenated in the
  // order given (a sectioned split: plan/slicing.h); one record whose ranges are those of the
  // rows read. Errors: as submit, and InvalidArgument for a range out of bounds or a scalar.
  Status submit_rows(const Catalog& catalog, const std::string& name, ByteReader& reader,
                     const std::vector<std::pair<int64_t, int64_t>>& rows);
  // Tensors queued and not yet taken by next().
  size_t pending() const;
  // The oldest queued tensor, once complete; rec (may be null) is overwritten with its record.
  // Errors: a helper's read error of that tensor (as load_f32). REQUIRES: pending() > 0.
  Result<Tensor> next(WeightRecord* rec);

  // submit + next, for one tensor. REQUIRES: pending() == 0.
  Result<Tensor> load(const Catalog& catalog, const std::string& name, ByteReader& reader, WeightRecord* rec);
  Result<Tensor> load_slice(const Catalog& catalog, const std::string& name, int dim, int64_t begin, int64_t end,
                            ByteReader& reader, WeightRecord* rec);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The whole tensor `name` as a host F32 tensor of its shape, loaded on the calling thread.
// rec (may be null) is overwritten.
// staging_bytes sets the chunk size as above (each chunk at least one element).
// Errors: NotFound (no such tensor in the catalog), Unsupported (non-numeric dtype, e.g. BOOL),
// and those of ByteReader::read; each names the tensor.
Result<Tensor> load_f32(const Catalog& catalog, const std::string& name, ByteReader& reader,
                        WeightRecord* rec, size_t staging_bytes = kDefaultStagingBytes);

// Indices [begin, end) of dimension dim of tensor `name`, as a host F32 tensor whose shape is
// the tensor's with shape[dim] = end - begin.
// dim 0 (any rank >= 1): one contiguous byte range. dim 1 (2-D only): one range per row, only
// the needed columns of each row are read.
// Errors: as load_f32, plus InvalidArgument for a dim other than 0/1, dim 1 of a non-2-D tensor,
// or a range outside 0 <= begin <= end <= shape[dim]; each names the tensor.
Result<Tensor> load_slice_f32(const Catalog& catalog, const std::string& name, int dim, int64_t begin,
                              int64_t end, ByteReader& reader, WeightRecord* rec,
                              size_t staging_bytes = kDefaultStagingBytes);

}  // namespace dayzero::checkpoint
