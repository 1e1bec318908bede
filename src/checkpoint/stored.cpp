// The layouts of weights kept as stored and the dispatch to each format's reader (stored.h).
#include "checkpoint/stored.h"

#include "checkpoint/fp4.h"
#include "checkpoint/fp8.h"
#include "checkpoint/pack_quantized.h"
#include "core/check.h"

namespace dayzero::checkpoint {
namespace {

const std::string kPackedSuffix = ".weight_packed";

// The module of an INT4 layout (its reader names the companions itself).
std::string int4_module(const StoredLayout& l) {
  DZ_CHECK(l.values.size() > kPackedSuffix.size() &&
               l.values.compare(l.values.size() - kPackedSuffix.size(), kPackedSuffix.size(), kPackedSuffix) == 0,
           l.values << " is not a compressed-tensors weight_packed tensor");
  return l.values.substr(0, l.values.size() - kPackedSuffix.size());
}

PackQuant int4_quant(const StoredLayout& l) {
  PackQuant q;
  q.group_size = l.block_cols;
  return q;
}

}  // namespace

StoredLayout compressed_tensors_layout(const std::string& module, const StoredFormat& f, int64_t group) {
  StoredLayout l;
  l.format = &f;
  l.values = module + kPackedSuffix;
  l.scale = module + ".weight_scale";
  if (f.global_scale_bytes) l.global = module + ".weight_global_scale";
  l.block_rows = 1;
  l.block_cols = group > 0 ? group : f.block_cols;
  return l;
}

StoredLayout own_name_layout(const std::string& weight, const std::string& scale, const StoredFormat& f,
                             int64_t block_rows, int64_t block_cols) {
  return {&f, weight, scale, "", -1, block_rows, block_cols};
}

StoredLayout gpt_oss_fp4_layout(const std::string& prefix, int64_t expert) {
  const StoredFormat& f = stored_format(StoredScheme::kMxfp4);
  return {&f, prefix + "_blocks", prefix + "_scales", "", expert, 1, f.block_cols};
}

Result<StoredWeightSlice> load_stored(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                      ByteReader& reader, WeightRecord* rec, int dim, int64_t begin, int64_t end,
                                      size_t staging_bytes) {
  switch (layout.format->scheme) {
    case StoredScheme::kFp8Block:
      return load_fp8_as_stored(catalog, layout.values, layout.scale, {layout.block_rows, layout.block_cols}, reader,
                                rec, dim, begin, end, staging_bytes);
    case StoredScheme::kInt4Group:
      return load_pack_quantized_as_stored(catalog, int4_module(layout), int4_quant(layout), out, in, reader, rec, dim,
                                           begin, end);
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4: return load_fp4_as_stored(catalog, layout, out, in, reader, rec, dim, begin, end);
  }
  return Status::Internal("load_stored: no reader for " + std::string(layout.format->name));
}

Result<Tensor> load_stored_dequant_f32(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                       ByteReader& reader, WeightRecord* rec, int dim, int64_t begin, int64_t end,
                                       size_t staging_bytes) {
  switch (layout.format->scheme) {
    case StoredScheme::kFp8Block:
      return load_fp8_dequant_f32(catalog, layout.values, layout.scale, {layout.block_rows, layout.block_cols}, reader,
                                  rec, dim, begin, end, staging_bytes);
    case StoredScheme::kInt4Group:
      return load_pack_quantized_f32(catalog, int4_module(layout), int4_quant(layout), out, in, reader, rec, dim, begin,
                                     end);
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4: return load_fp4_dequant_f32(catalog, layout, out, in, reader, rec, dim, begin, end);
  }
  return Status::Internal("load_stored_dequant_f32: no reader for " + std::string(layout.format->name));
}

}  // namespace dayzero::checkpoint
