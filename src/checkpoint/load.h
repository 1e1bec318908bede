// Loading one tensor (or one rank's slice of it) from a catalogued checkpoint into a host F32
// tensor, streaming through a bounded staging buffer, with a record of exactly what was read.
// Not the shard-rule logic (which rank owns which slice): callers pass the slice bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/reader.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::checkpoint {

// Upper bound on host memory used for raw on-disk bytes while loading one tensor.
// Staging per rank: two buffers of half this size (one read while the other is converted).
inline constexpr size_t kDefaultStagingBytes = 256ull << 20;

struct WeightRecord {
  std::string name, file;
  DType dtype = DType::kF32;                          // on-disk dtype
  Shape shape;                                        // of the slice loaded
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (offset, len) on disk, coalesced, in read order
  uint64_t bytes_read = 0;                            // sum of range lengths
  uint64_t checksum = 0;                 // xxh64 (seed 0) of the on-disk bytes read, in read order
  int64_t nan_count = 0, inf_count = 0;  // in the converted f32 values
  uint64_t reads = 0;                    // read calls issued (a column slice costs one per row)
  // Bytes of companion tensors read with this one (an FP8 weight's scale_inv, fp8.h); they are
  // not in ranges, bytes_read, checksum or reads.
  uint64_t aux_bytes_read = 0;
};

// The whole tensor `name` as a host F32 tensor of its shape. rec (may be null) is overwritten.
// staging_bytes caps the staging buffer (both buffers together; each at least one element).
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
