// compressed-tensors pack-quantized INT4 (pack_quantized.h): config parsing, the ignore list,
// dequantizing loads of whole tensors or row / column slices, and packing for test checkpoints.
// Bit order and offset as compressed_tensors/compressors/pack_quantized/helpers.py.
#include "checkpoint/pack_quantized.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "checkpoint/compressed_tensors.h"
#include "checkpoint/xxhash.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/json.h"
#include "core/strings.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

Result<std::optional<PackQuant>> parse(const json& config, const std::string& where) {
  if (!config.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::optional<PackQuant>{};
  const std::string qw = where + ".quantization_config";
  DZ_ASSIGN_OR_RETURN(CompressedTensorsGroup group, parse_compressed_tensors(*it, qw));
  if (group.format != "pack-quantized")
    return Status::Unsupported(qw + ".format '" + group.format + "' is not supported (pack-quantized)");
  const json& w = *group.weights;
  const std::string wk = group.weights_key + ".";
  const std::pair<const char*, json> want[] = {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}};
  for (const auto& [key, value] : want)
    if (!w.contains(key) || w[key] != value) return unsupported_key(qw, wk + key, w.value(key, json()), value.dump());
  if (!w.contains("group_size") || !w["group_size"].is_number_integer() || w["group_size"].get<int64_t>() <= 0 ||
      w["group_size"].get<int64_t>() > (int64_t{1} << 20))
    return Status::InvalidArgument(qw + "." + wk + "group_size " + json_excerpt(w.value("group_size", json())) +
                                   " is not a positive integer");
  PackQuant pq;
  pq.group_size = w["group_size"].get<int64_t>();
  static_cast<IgnoreList&>(pq) = std::move(group.ignore);
  return std::optional<PackQuant>{std::move(pq)};
}

}  // namespace

Result<std::optional<PackQuant>> parse_pack_quant(const json& config, const std::string& where) {
  try {
    return parse(config, where);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(where + ": quantization_config: " + e.what());
  }
}

std::string packed_name(const std::string& module) { return module + ".weight_packed"; }
std::string group_scale_name(const std::string& module) { return module + ".weight_scale"; }
std::string weight_shape_name(const std::string& module) { return module + ".weight_shape"; }

namespace {

// A pack-quantized weight's slice as read: the int32 words covering its columns in each of its
// rows, and the f32 scales of the groups covering them, [rows, g1 - g0]; the record of the
// words' reads (aux_bytes_read: the scales' and weight_shape's).
struct PackedSlice {
  int64_t rows = 0, c0 = 0, c1 = 0, w0 = 0, w1 = 0;
  std::vector<int32_t> words;
  Tensor scale;
  WeightRecord rec;
  // Element j (a column of the whole weight, c0 <= j < c1) of row i as q.
  int q(int64_t i, int64_t j) const {
    const auto word = static_cast<uint32_t>(words[static_cast<size_t>(i * (w1 - w0) + j / 8 - w0)]);
    return static_cast<int>((word >> (4 * (j % 8))) & 0xFu) - 8;
  }
};

Result<PackedSlice> read_packed_slice(const Catalog& catalog, const std::string& module, const PackQuant& quant,
                                      int64_t out, int64_t in, ByteReader& reader, int dim, int64_t begin,
                                      int64_t end) {
  const std::string pname = packed_name(module), sname = group_scale_name(module), shname = weight_shape_name(module);
  const TensorInfo* p = catalog.find(pname);
  const TensorInfo* s = catalog.find(sname);
  const TensorInfo* sh = catalog.find(shname);
  for (const auto& [t, n] : {std::pair{p, pname}, std::pair{s, sname}, std::pair{sh, shname}})
    if (!t)
      return Status::NotFound(catalog.dir() + ": tensor " + single_quoted(n) + " of the pack-quantized weight " +
                              single_quoted(module + ".weight") + " is not in the checkpoint");
  const Shape pshape = {out, quant.words(in)}, sshape = {out, quant.groups(in)};
  auto where = [](const TensorInfo& t) { return t.file + ": tensor " + single_quoted(t.name) + " " + shape_str(t.shape); };
  if (p->dtype != DType::kI32) return Status::InvalidArgument(where(*p) + ": dtype " + dtype_name(p->dtype) + ", expected I32");
  if (p->shape != pshape) return Status::InvalidArgument(where(*p) + ": expected shape " + shape_str(pshape));
  if (s->dtype != DType::kBF16 && s->dtype != DType::kF32 && s->dtype != DType::kF16)
    return Status::InvalidArgument(where(*s) + ": dtype " + dtype_name(s->dtype) + ", expected BF16, F16 or F32");
  if (s->shape != sshape)
    return Status::InvalidArgument(where(*s) + ": expected shape " + shape_str(sshape) + " (groups of " +
                                   std::to_string(quant.group_size) + ")");
  if ((sh->dtype != DType::kI32 && sh->dtype != DType::kI64) || sh->shape != Shape{2})
    return Status::InvalidArgument(where(*sh) + ": dtype " + dtype_name(sh->dtype) + ", expected I32 [2]");
  int64_t r0 = 0, r1 = out, c0 = 0, c1 = in;
  if (dim != -1) {
    if (dim != 0 && dim != 1)
      return Status::InvalidArgument(where(*p) + ": can only slice dim 0 or 1 (or -1: whole), not " + std::to_string(dim));
    const int64_t extent = dim == 0 ? out : in;
    if (begin < 0 || begin > end || end > extent)
      return Status::InvalidArgument(where(*p) + ": slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") of dim " + std::to_string(dim) + " is out of range");
    (dim == 0 ? r0 : c0) = begin;
    (dim == 0 ? r1 : c1) = end;
  }
  uint64_t aux = 0;
  {
    int64_t v[2] = {0, 0};
    if (sh->dtype == DType::kI64) {
      DZ_RETURN_IF_ERROR(reader.read(sh->file, sh->offset, 16, v));
    } else {
      int32_t v32[2];
      DZ_RETURN_IF_ERROR(reader.read(sh->file, sh->offset, 8, v32));
      v[0] = v32[0], v[1] = v32[1];
    }
    aux += sh->nbytes;
    if (v[0] != out || v[1] != in)
      return Status::InvalidArgument(where(*sh) + ": holds [" + std::to_string(v[0]) + ", " + std::to_string(v[1]) +
                                     "], expected [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  }
  const int64_t n_rows = r1 - r0, n_cols = c1 - c0, W = pshape[1];
  PackedSlice sl;
  sl.rows = n_rows, sl.c0 = c0, sl.c1 = c1;
  // Words and groups covering the columns.
  const int64_t w0 = c0 / 8, w1 = n_cols > 0 ? (c1 - 1) / 8 + 1 : w0;
  const int64_t g0 = c0 / quant.group_size, g1 = n_cols > 0 ? (c1 - 1) / quant.group_size + 1 : g0;
  sl.w0 = w0, sl.w1 = w1;
  WeightRecord& wrec = sl.rec;
  wrec.name = module + ".weight";
  wrec.file = p->file;
  wrec.dtype = DType::kI32;
  wrec.shape = {n_rows, n_cols};
  Xxh64 hash;
  sl.words.resize(static_cast<size_t>(n_rows * (w1 - w0)));
  std::vector<int32_t>& words = sl.words;
  if (n_rows > 0 && w1 > w0) {
    if (w0 == 0 && w1 == W) {
      DZ_RETURN_IF_ERROR(read_recorded(reader, *p, static_cast<uint64_t>(r0 * W * 4), static_cast<uint64_t>(n_rows * W * 4),
                                    words.data(), &wrec, &hash));
    } else {
      for (int64_t i = 0; i < n_rows; ++i)
        DZ_RETURN_IF_ERROR(read_recorded(reader, *p, static_cast<uint64_t>(((r0 + i) * W + w0) * 4),
                                      static_cast<uint64_t>((w1 - w0) * 4), words.data() + i * (w1 - w0), &wrec, &hash));
    }
  }
  wrec.checksum = hash.digest();
  if (n_rows > 0 && n_cols > 0) {
    WeightRecord srec;
    // [rows, g1 - g0]: a column slice reads the groups covering it, a row slice (or the whole) all.
    DZ_ASSIGN_OR_RETURN(sl.scale, dim == 1 ? load_slice_f32(catalog, sname, 1, g0, g1, reader, &srec)
                                           : load_slice_f32(catalog, sname, 0, r0, r1, reader, &srec));
    aux += srec.bytes_read;
  }
  wrec.aux_bytes_read = aux;
  return sl;
}

}  // namespace

Result<Tensor> load_pack_quantized_f32(const Catalog& catalog, const std::string& module, const PackQuant& quant,
                                       int64_t out, int64_t in, ByteReader& reader, WeightRecord* rec, int dim,
                                       int64_t begin, int64_t end) {
  DZ_ASSIGN_OR_RETURN(PackedSlice sl, read_packed_slice(catalog, module, quant, out, in, reader, dim, begin, end));
  const int64_t n_cols = sl.c1 - sl.c0, g0 = sl.c0 / quant.group_size;
  Tensor result = Tensor::host(DType::kF32, {sl.rows, n_cols});
  if (sl.rows > 0 && n_cols > 0) {
    const float* sc = sl.scale.f32();  // [rows, groups covering the columns]
    const int64_t sc_cols = sl.scale.dim(1);
    float* dst = result.f32();
    for (int64_t i = 0; i < sl.rows; ++i)
      for (int64_t j = sl.c0; j < sl.c1; ++j)
        dst[i * n_cols + (j - sl.c0)] = static_cast<float>(sl.q(i, j)) * sc[i * sc_cols + (j / quant.group_size - g0)];
    for (int64_t i = 0; i < result.numel(); ++i) {
      sl.rec.nan_count += std::isnan(dst[i]);
      sl.rec.inf_count += std::isinf(dst[i]);
    }
  }
  if (rec) *rec = std::move(sl.rec);
  return result;
}

Result<StoredWeightSlice> load_pack_quantized_as_stored(const Catalog& catalog, const std::string& module,
                                                        const PackQuant& quant, int64_t out, int64_t in,
                                                        ByteReader& reader, WeightRecord* rec, int dim, int64_t begin,
                                                        int64_t end) {
  const TensorInfo* s = catalog.find(group_scale_name(module));
  if (s && s->dtype != DType::kBF16)
    return Status::InvalidArgument(s->file + ": tensor " + single_quoted(s->name) + ": dtype " + dtype_name(s->dtype) +
                                   ", kept as stored only in BF16");
  DZ_ASSIGN_OR_RETURN(PackedSlice sl, read_packed_slice(catalog, module, quant, out, in, reader, dim, begin, end));
  const int64_t n_cols = sl.c1 - sl.c0, g0 = sl.c0 / quant.group_size, row_bytes = (sl.w1 - sl.w0) * 4;
  StoredWeightSlice a;
  a.slice = {&stored_format(StoredScheme::kInt4Group), sl.rows, n_cols, 0, sl.c0, 1, quant.group_size};
  a.values = Tensor::host(DType::kU8, {sl.rows, row_bytes});
  if (sl.rows == 0 || n_cols == 0) {
    a.scale = Tensor::host(DType::kBF16, {sl.rows, 0});
    if (rec) *rec = std::move(sl.rec);
    return a;
  }
  const float* sc = sl.scale.f32();  // widened from bf16: exact, so narrowing back is too
  const int64_t sc_cols = sl.scale.dim(1);
  a.scale = Tensor::host(DType::kBF16, {sl.rows, sc_cols});
  auto* scale = static_cast<uint16_t*>(a.scale.data());
  for (int64_t i = 0; i < sl.rows * sc_cols; ++i) scale[i] = f32_to_bf16(sc[i]);
  auto* dst = static_cast<uint8_t*>(a.values.data());
  for (int64_t i = 0; i < sl.rows; ++i)
    for (int64_t j = sl.c0; j < sl.c1; ++j) {
      const int q = sl.q(i, j);
      const int64_t p = j - sl.c0;
      dst[i * row_bytes + p / 2] |= static_cast<uint8_t>((q + 8) << (4 * (p % 2)));
      // The value the dequantising load gives it, for the record's NaN and infinity counts.
      const float v = static_cast<float>(q) * sc[i * sc_cols + (j / quant.group_size - g0)];
      sl.rec.nan_count += std::isnan(v);
      sl.rec.inf_count += std::isinf(v);
    }
  if (rec) *rec = std::move(sl.rec);
  return a;
}

PackedWeight pack_quantize(const float* w, int64_t rows, int64_t cols, const PackQuant& quant) {
  DZ_CHECK(quant.bits == 4 && rows >= 0 && cols >= 0, "pack_quantize of " << quant.bits << " bits");
  const int64_t W = quant.words(cols), G = quant.groups(cols), g = quant.group_size;
  PackedWeight r;
  r.packed.assign(static_cast<size_t>(rows * W), 0);
  r.scale_bf16.assign(static_cast<size_t>(rows * G), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < G; ++k) {
      const int64_t j0 = k * g, j1 = std::min(cols, j0 + g);
      float amax = 0;
      for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(w[i * cols + j]));
      uint16_t sb = f32_to_bf16(amax / 7.5f);
      if (bf16_to_f32(sb) == 0.0f) sb = f32_to_bf16(1.0f);
      r.scale_bf16[static_cast<size_t>(i * G + k)] = sb;
      const float s = bf16_to_f32(sb);
      for (int64_t j = j0; j < j1; ++j) {
        const int q = static_cast<int>(std::clamp(std::nearbyint(w[i * cols + j] / s), -8.0f, 7.0f));
        uint32_t& word = reinterpret_cast<uint32_t&>(r.packed[static_cast<size_t>(i * W + j / 8)]);
        word |= static_cast<uint32_t>(q + 8) << (4 * (j % 8));
      }
    }
  return r;
}

}  // namespace dayzero::checkpoint
