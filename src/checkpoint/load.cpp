// Streaming loads: read coalesced byte ranges chunk by chunk, hash, convert to f32, count NaN/Inf.
#include "checkpoint/load.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <memory>
#include <new>

#include "checkpoint/xxhash.h"

namespace dayzero::checkpoint {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
constexpr uint64_t kOverlapMinBytes = 1u << 20;  // below this a chunk is read on the calling thread

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

// The two staging buffers of this thread, grown on demand and kept: faulting in fresh pages
// for every tensor costs more than the copy itself.
uint8_t* staging_buffer(int which, size_t bytes) {
  thread_local std::vector<uint8_t> buffers[2];
  if (buffers[which].size() < bytes) {
    buffers[which] = std::vector<uint8_t>();
    buffers[which].resize(bytes);
  }
  return buffers[which].data();
}

// Reads ranges of t's file in order, converting each staged chunk into the next elements of a
// host F32 tensor of shape (whose numel matches the ranges' total). The staging buffer holds at
// most staging_bytes, rounded down to whole elements.
Result<Tensor> stream(const TensorInfo& t, Shape shape, const Ranges& ranges, ByteReader& reader,
                      WeightRecord* rec, size_t staging_bytes) {
  const size_t esize = dtype_size(t.dtype);
  const size_t chunk = std::max(esize, staging_bytes / 2 / esize * esize);
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;

  // Chunks in read order; while one is hashed and converted, the next is read on a helper
  // thread (double buffering), so page-cache copies overlap conversion.
  struct Chunk {
    uint64_t offset, len;
  };
  std::vector<Chunk> chunks;
  for (const auto& [offset, len] : ranges)
    for (uint64_t pos = 0; pos < len; pos += chunk) chunks.push_back({offset + pos, std::min<uint64_t>(chunk, len - pos)});
  Tensor out;
  uint8_t* bufs[2] = {nullptr, nullptr};
  try {
    out = Tensor::host_uninitialized(DType::kF32, shape);
    const size_t need = std::min<uint64_t>(chunk, std::max<uint64_t>(total, 1));
    bufs[0] = staging_buffer(0, need);
    if (chunks.size() > 1) bufs[1] = staging_buffer(1, need);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(t.file + ": tensor '" + t.name + "': cannot allocate " +
                               std::to_string(shape_numel(shape) * 4) + " bytes of F32");
  }
  float* dst = out.f32();
  Xxh64 hash;
  int64_t nan_count = 0, inf_count = 0;
  const uint64_t reads_before = reader.reads();
  // F32 on disk needs no conversion: chunks are read straight into the result.
  const bool direct = t.dtype == DType::kF32;
  std::vector<uint8_t*> chunk_dst;
  if (direct) {
    auto* p = reinterpret_cast<uint8_t*>(dst);
    for (const auto& c : chunks) {
      chunk_dst.push_back(p);
      p += c.len;
    }
  }
  const auto read_chunk = [&](size_t i) {
    return reader.read(t.file, chunks[i].offset, chunks[i].len, direct ? chunk_dst[i] : bufs[i % 2]);
  };
  std::future<Status> pending;
  Status first = chunks.empty() ? Status::Ok() : read_chunk(0);
  DZ_RETURN_IF_ERROR_CTX(first, "tensor '" + t.name + "'");
  for (size_t i = 0; i < chunks.size(); ++i) {
    // Small chunks (rows of a column slice) are read inline: a thread per row costs more.
    const bool next = i + 1 < chunks.size();
    const bool overlap = next && chunks[i + 1].len >= kOverlapMinBytes;
    if (overlap) pending = std::async(std::launch::async, read_chunk, i + 1);
    const uint8_t* buf = direct ? chunk_dst[i] : bufs[i % 2];
    const uint64_t n = chunks[i].len;
    hash.update(buf, n);
    const size_t count = n / esize;
    if (!direct) convert_to_f32(t.dtype, buf, dst, count);
    // NaN and Inf by their exponent bits: integer compares the compiler vectorises.
    const auto* bits = reinterpret_cast<const uint32_t*>(dst);
    int64_t non_finite = 0, infinite = 0;
    for (size_t j = 0; j < count; ++j) {
      non_finite += (bits[j] & 0x7f800000u) == 0x7f800000u;
      infinite += (bits[j] & 0x7fffffffu) == 0x7f800000u;
    }
    nan_count += non_finite - infinite;
    inf_count += infinite;
    dst += count;
    if (overlap) DZ_RETURN_IF_ERROR_CTX(pending.get(), "tensor '" + t.name + "'");
    else if (next) DZ_RETURN_IF_ERROR_CTX(read_chunk(i + 1), "tensor '" + t.name + "'");
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
