// Streaming loads: read coalesced byte ranges chunk by chunk, hash, convert to f32, count NaN/Inf.
#include "checkpoint/load.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <new>

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

// Reads ranges of t's file in order, converting each staged chunk into the next elements of a
// host F32 tensor of shape (whose numel matches the ranges' total). The staging buffer holds at
// most staging_bytes, rounded down to whole elements.
Result<Tensor> stream(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader,
                      WeightRecord* rec, size_t staging_bytes) {
  const size_t esize = dtype_size(t.dtype);
  const size_t chunk = std::max(esize, std::min(staging_bytes, kMaxStagingBytes) / esize * esize);
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;

  Tensor out;
  std::unique_ptr<uint8_t[]> staging;
  try {
    out = Tensor::host(DType::kF32, shape);
    staging =
        std::make_unique_for_overwrite<uint8_t[]>(std::min<uint64_t>(chunk, std::max<uint64_t>(total, 1)));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(t.file + ": tensor '" + t.name + "': cannot allocate " +
                               std::to_string(shape_numel(shape) * 4) + " bytes of F32");
  }
  float* dst = out.f32();
  Xxh64 hash;
  int64_t nan_count = 0, inf_count = 0;
  const uint64_t reads_before = reader.reads();
  for (const auto& [offset, len] : ranges) {
    for (uint64_t pos = 0; pos < len; pos += chunk) {
      const uint64_t n = std::min<uint64_t>(chunk, len - pos);
      DZ_RETURN_IF_ERROR_CTX(reader.read(t.file, offset + pos, n, staging.get()), "tensor '" + t.name + "'");
      hash.update(staging.get(), n);
      const size_t count = n / esize;
      convert_to_f32(t.dtype, staging.get(), dst, count);
      for (size_t i = 0; i < count; ++i) {
        nan_count += std::isnan(dst[i]);
        inf_count += std::isinf(dst[i]);
      }
      dst += count;
    }
  }
  if (rec) {
    *rec = WeightRecord{};
    rec->name = t.name;
    rec->file = t.file;
    rec->dtype = t.dtype;
    rec->shape = std::move(shape);
    rec->ranges = ranges;
    rec->bytes_read = total;
    rec->checksum = hash.digest();
    rec->nan_count = nan_count;
    rec->inf_count = inf_count;
    rec->reads = reader.reads() - reads_before;
  }
  return out;
}

}  // namespace

Result<Tensor> load_f32(const Catalog& catalog, const std::string& name, ByteReader& reader,
                        WeightRecord* rec, size_t staging_bytes) {
  DZ_ASSIGN_OR_RETURN(const TensorInfo* t, find_numeric(catalog, name));
  Ranges ranges;
  add_range(ranges, t->offset, t->nbytes);
  return stream(*t, t->shape, ranges, reader, rec, staging_bytes);
}

Result<Tensor> load_slice_f32(const Catalog& catalog, const std::string& name, int dim, int64_t begin,
                              int64_t end, ByteReader& reader, WeightRecord* rec, size_t staging_bytes) {
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
  return stream(*t, std::move(shape), ranges, reader, rec, staging_bytes);
}

}  // namespace dayzero::checkpoint
