// FP4 weights as their published layouts store them (fp4.h): header validation, row and column
// slices read as stored or dequantised, and quantization for test checkpoints. The element's
// value is core/stored_format.h's (e2m1 x the group's scale, one f32 multiply).
#include "checkpoint/fp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "checkpoint/compressed_tensors.h"
#include "checkpoint/fp8.h"
#include "checkpoint/xxhash.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/json.h"
#include "core/strings.h"

namespace dayzero::checkpoint {
namespace {

std::string fp4_where(const TensorInfo& t) { return t.file + ": tensor " + single_quoted(t.name) + " " + shape_str(t.shape); }

bool scale_byte_is_nan(StoredScheme scheme, uint8_t b) {
  return scheme == StoredScheme::kMxfp4 ? b == 0xff : (b & 0x7f) == 0x7f;
}

// The slice as read: per row the file bytes covering its columns and the scale bytes of the
// groups covering them; the values' record.
struct Fp4Read {
  int64_t rows = 0, c0 = 0, c1 = 0, byte0 = 0, row_bytes = 0, group0 = 0, scale_cols = 0;
  std::vector<uint8_t> bytes;  // [rows, row_bytes]
  std::vector<uint8_t> scale;  // [rows, scale_cols]
  float global = 1.0f;
  WeightRecord rec;
  int code(int64_t i, int64_t j) const {  // column j of the whole weight
    return (bytes[static_cast<size_t>(i * row_bytes + j / 2 - byte0)] >> (4 * (j % 2))) & 15;
  }
};

Result<Fp4Read> read_fp4(const Catalog& catalog, const StoredLayout& l, int64_t out, int64_t in, ByteReader& reader,
                         int dim, int64_t begin, int64_t end) {
  const StoredFormat& f = *l.format;
  DZ_CHECK(is_fp4(f.scheme), "read_fp4: " << f.name << " is not FP4");
  const bool nv = f.scheme == StoredScheme::kNvfp4;
  const int64_t g = f.block_cols, groups = (in + g - 1) / g, file_row_bytes = (in + 1) / 2;
  const TensorInfo* v = catalog.find(l.values);
  const TensorInfo* s = catalog.find(l.scale);
  const TensorInfo* gl = nv ? catalog.find(l.global) : nullptr;
  const std::string weight = single_quoted(l.values) + (l.expert >= 0 ? " (expert " + std::to_string(l.expert) + ")" : "");
  for (const auto& [t, n] : {std::pair{v, l.values}, std::pair{s, l.scale}})
    if (!t)
      return Status::NotFound(catalog.dir() + ": tensor " + single_quoted(n) + " of the " + f.name + " weight " + weight +
                              " is not in the checkpoint");
  if (nv && !gl)
    return Status::NotFound(catalog.dir() + ": tensor " + single_quoted(l.global) + " of the nvfp4 weight " + weight +
                            " is not in the checkpoint");
  // Values: two codes a byte; a fused experts tensor [E, out, in / g, g / 2].
  Shape vshape = {out, file_row_bytes}, sshape = {out, groups};
  if (l.expert >= 0) {
    if (v->shape.empty() || l.expert >= v->shape[0])
      return Status::InvalidArgument(fp4_where(*v) + ": no expert " + std::to_string(l.expert));
    if (in % g != 0)
      return Status::InvalidArgument(fp4_where(*v) + ": " + std::to_string(in) + " inputs are not whole blocks of " +
                                     std::to_string(g));
    vshape = {v->shape[0], out, in / g, g / 2};
    sshape = {v->shape[0], out, groups};
  }
  if (v->dtype != DType::kU8 && !(l.expert < 0 && v->dtype == DType::kI8))
    return Status::InvalidArgument(fp4_where(*v) + ": dtype " + dtype_name(v->dtype) + ", expected U8" +
                                   (l.expert < 0 ? " or I8" : "") + " (two E2M1 codes a byte)");
  if (v->shape != vshape)
    return Status::InvalidArgument(fp4_where(*v) + ": expected shape " + shape_str(vshape) + " for a " + f.name +
                                   " weight [" + std::to_string(out) + ", " + std::to_string(in) + "] (two codes a byte)");
  const bool scale_dtype_ok = nv ? s->dtype == DType::kF8_E4M3 : (s->dtype == DType::kU8 || s->dtype == DType::kF8_E8M0);
  if (!scale_dtype_ok)
    return Status::InvalidArgument(fp4_where(*s) + ": dtype " + dtype_name(s->dtype) + ", expected " +
                                   (nv ? "F8_E4M3" : "U8 or F8_E8M0") + " for the scales of " + weight);
  if (s->shape != sshape)
    return Status::InvalidArgument(fp4_where(*s) + ": expected shape " + shape_str(sshape) + " (one scale per " +
                                   std::to_string(g) + " inputs of " + weight + ")");
  int64_t r0 = 0, r1 = out, c0 = 0, c1 = in;
  if (dim != -1) {
    if (dim != 0 && dim != 1)
      return Status::InvalidArgument(fp4_where(*v) + ": can only slice dim 0 or 1 (or -1: whole), not " + std::to_string(dim));
    const int64_t extent = dim == 0 ? out : in;
    if (begin < 0 || begin > end || end > extent)
      return Status::InvalidArgument(fp4_where(*v) + ": slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") of dim " + std::to_string(dim) + " is out of range");
    (dim == 0 ? r0 : c0) = begin;
    (dim == 0 ? r1 : c1) = end;
  }
  Fp4Read rd;
  uint64_t aux = 0;
  if (nv) {
    if (gl->dtype != DType::kF32 || !(gl->shape == Shape{1} || gl->shape.empty()))
      return Status::InvalidArgument(fp4_where(*gl) + ": dtype " + dtype_name(gl->dtype) + ", expected F32 [1] (the global scale of " +
                                     weight + ")");
    DZ_RETURN_IF_ERROR(reader.read(gl->file, gl->offset, 4, &rd.global));
    aux += 4;
    if (!std::isfinite(rd.global) || rd.global <= 0.0f)
      return Status::InvalidArgument(fp4_where(*gl) + ": global scale " + std::to_string(rd.global) +
                                     " is not finite and positive");
  }
  const int64_t rows = r1 - r0, cols = c1 - c0;
  const StoredSlice held{&f, rows, cols, r0, c0, 1, g};
  rd.rows = rows, rd.c0 = c0, rd.c1 = c1;
  rd.byte0 = c0 / 2;
  rd.row_bytes = cols > 0 ? held.value_row_bytes() : 0;
  rd.group0 = c0 / g;
  rd.scale_cols = cols > 0 ? held.scale_cols() : 0;
  const int64_t base = l.expert >= 0 ? l.expert * out : 0;  // rows before this expert's
  WeightRecord& rec = rd.rec;
  rec.name = l.values + (l.expert >= 0 ? "[" + std::to_string(l.expert) + "]" : "");
  rec.file = v->file;
  rec.dtype = v->dtype;
  rec.shape = {rows, cols};
  Xxh64 hash;
  rd.bytes.assign(static_cast<size_t>(rows * rd.row_bytes), 0);
  rd.scale.assign(static_cast<size_t>(rows * rd.scale_cols), 0);
  if (rows > 0 && cols > 0) {
    if (rd.row_bytes == file_row_bytes) {
      DZ_RETURN_IF_ERROR(read_recorded(reader, *v, static_cast<uint64_t>((base + r0) * file_row_bytes),
                                  static_cast<uint64_t>(rows * file_row_bytes), rd.bytes.data(), &rec, &hash));
    } else {
      for (int64_t i = 0; i < rows; ++i)
        DZ_RETURN_IF_ERROR(read_recorded(reader, *v, static_cast<uint64_t>((base + r0 + i) * file_row_bytes + rd.byte0),
                                    static_cast<uint64_t>(rd.row_bytes), rd.bytes.data() + i * rd.row_bytes, &rec,
                                    &hash));
    }
    WeightRecord srec;
    if (rd.scale_cols == groups) {
      DZ_RETURN_IF_ERROR(read_recorded(reader, *s, static_cast<uint64_t>((base + r0) * groups),
                                  static_cast<uint64_t>(rows * groups), rd.scale.data(), &srec, nullptr));
    } else {
      for (int64_t i = 0; i < rows; ++i)
        DZ_RETURN_IF_ERROR(read_recorded(reader, *s, static_cast<uint64_t>((base + r0 + i) * groups + rd.group0),
                                    static_cast<uint64_t>(rd.scale_cols), rd.scale.data() + i * rd.scale_cols, &srec,
                                    nullptr));
    }
    aux += srec.bytes_read;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < rd.scale_cols; ++j)
        if (scale_byte_is_nan(f.scheme, rd.scale[static_cast<size_t>(i * rd.scale_cols + j)]))
          return Status::InvalidArgument(fp4_where(*s) + ": the scale of row " + std::to_string(r0 + i) + ", group " +
                                         std::to_string(rd.group0 + j) + (l.expert >= 0 ? " of expert " + std::to_string(l.expert) : "") +
                                         " is NaN (byte " + std::to_string(rd.scale[static_cast<size_t>(i * rd.scale_cols + j)]) + ")");
  }
  rec.checksum = hash.digest();
  rec.aux_bytes_read = aux;
  return rd;
}

// Element (i, j) of the read (j a column of the whole weight) as its value.
float fp4_value(const Fp4Read& rd, const StoredFormat& f, int64_t i, int64_t j) {
  const uint8_t s = rd.scale[static_cast<size_t>(i * rd.scale_cols + j / f.block_cols - rd.group0)];
  return e2m1_to_f32(static_cast<uint8_t>(rd.code(i, j))) * fp4_group_scale(f.scale, s, rd.global);
}

const char* fp4_format_name(StoredScheme s) {
  return s == StoredScheme::kNvfp4 ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
}

Result<std::optional<Fp4Quant>> parse_fp4(const nlohmann::json& config, const std::string& where) {
  using nlohmann::json;
  if (!is_fp4_quant_config(config)) return std::optional<Fp4Quant>{};
  const std::string qw = where + ": quantization_config";
  DZ_ASSIGN_OR_RETURN(CompressedTensorsGroup group, parse_compressed_tensors(config["quantization_config"], qw));
  Fp4Quant fq;
  fq.scheme = group.format == "nvfp4-pack-quantized" ? StoredScheme::kNvfp4 : StoredScheme::kMxfp4;
  const bool nv = fq.scheme == StoredScheme::kNvfp4;
  const json& w = *group.weights;
  const std::string wk = group.weights_key + ".";
  const int64_t g = stored_format(fq.scheme).block_cols;
  const std::pair<const char*, json> want[] = {{"num_bits", 4},
                                               {"type", "float"},
                                               {"symmetric", true},
                                               {"strategy", nv ? "tensor_group" : "group"},
                                               {"group_size", g}};
  for (const auto& [key, value] : want)
    if (!w.contains(key) || w[key] != value) return unsupported_key(qw, wk + key, w.value(key, json()), value.dump());
  static_cast<IgnoreList&>(fq) = std::move(group.ignore);
  return std::optional<Fp4Quant>{std::move(fq)};
}

}  // namespace

bool is_fp4_quant_config(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("quantization_config") || !config["quantization_config"].is_object())
    return false;
  const auto& q = config["quantization_config"];
  if (!q.contains("quant_method") || q["quant_method"] != "compressed-tensors") return false;
  const std::string f = compressed_tensors_format(q);
  return f == "mxfp4-pack-quantized" || f == "nvfp4-pack-quantized";
}

Result<std::optional<Fp4Quant>> parse_fp4_quant(const nlohmann::json& config, const std::string& where) {
  try {
    return parse_fp4(config, where);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(where + ": quantization_config: " + e.what());
  }
}

nlohmann::json fp4_quant_config(StoredScheme scheme, const std::vector<std::string>& ignore) {
  const bool nv = scheme == StoredScheme::kNvfp4;
  nlohmann::json weights = {{"num_bits", 4},
                            {"type", "float"},
                            {"symmetric", true},
                            {"dynamic", false},
                            {"strategy", nv ? "tensor_group" : "group"},
                            {"group_size", stored_format(scheme).block_cols}};
  return {{"quant_method", "compressed-tensors"},
          {"format", fp4_format_name(scheme)},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore", ignore}};
}

Result<StoredWeightSlice> load_fp4_as_stored(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                       ByteReader& reader, WeightRecord* rec, int dim, int64_t begin, int64_t end) {
  DZ_ASSIGN_OR_RETURN(Fp4Read rd, read_fp4(catalog, layout, out, in, reader, dim, begin, end));
  const StoredFormat& f = *layout.format;
  StoredWeightSlice a;
  const int64_t cols = rd.c1 - rd.c0;
  a.slice = {&f, rd.rows, cols, 0, rd.c0, 1, f.block_cols};
  a.global_scale = rd.global;
  a.values = Tensor::host(DType::kU8, {rd.rows, rd.row_bytes});
  a.scale = Tensor::host(DType::kU8, {rd.rows, rd.scale_cols});
  auto* dst = static_cast<uint8_t*>(a.values.data());
  if (rd.c0 % 2 == 0) {
    std::memcpy(dst, rd.bytes.data(), rd.bytes.size());
    if (rd.c1 % 2 == 1)  // the high nibble after the last column
      for (int64_t i = 0; i < rd.rows; ++i) dst[i * rd.row_bytes + (cols - 1) / 2] &= 0x0f;
  } else {
    for (int64_t i = 0; i < rd.rows; ++i)
      for (int64_t j = rd.c0; j < rd.c1; ++j) {
        const int64_t p = j - rd.c0;
        dst[i * rd.row_bytes + p / 2] |= static_cast<uint8_t>(rd.code(i, j) << (4 * (p % 2)));
      }
  }
  std::memcpy(a.scale.data(), rd.scale.data(), rd.scale.size());
  for (int64_t i = 0; i < rd.rows; ++i)
    for (int64_t j = rd.c0; j < rd.c1; ++j) {
      const float v = fp4_value(rd, f, i, j);
      rd.rec.nan_count += std::isnan(v);
      rd.rec.inf_count += std::isinf(v);
    }
  if (rec) *rec = std::move(rd.rec);
  return a;
}

Result<Tensor> load_fp4_dequant_f32(const Catalog& catalog, const StoredLayout& layout, int64_t out, int64_t in,
                                    ByteReader& reader, WeightRecord* rec, int dim, int64_t begin, int64_t end) {
  DZ_ASSIGN_OR_RETURN(Fp4Read rd, read_fp4(catalog, layout, out, in, reader, dim, begin, end));
  const StoredFormat& f = *layout.format;
  const int64_t cols = rd.c1 - rd.c0;
  Tensor t = Tensor::host(DType::kF32, {rd.rows, cols});
  float* d = t.f32();
  for (int64_t i = 0; i < rd.rows; ++i)
    for (int64_t j = rd.c0; j < rd.c1; ++j) {
      const float v = fp4_value(rd, f, i, j);
      d[i * cols + (j - rd.c0)] = v;
      rd.rec.nan_count += std::isnan(v);
      rd.rec.inf_count += std::isinf(v);
    }
  if (rec) *rec = std::move(rd.rec);
  return t;
}

uint8_t f32_to_e2m1(float x) {
  const float a = std::fabs(x);
  uint8_t best = 7;
  if (!std::isnan(a)) {
    float best_d = INFINITY;
    for (uint8_t c = 0; c < 8; ++c) {
      const float d = std::fabs(a - e2m1_to_f32(c));
      if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) && !std::isnan(x) ? 8 : 0));
}

Fp4Packed fp4_quantize(const float* w, int64_t rows, int64_t cols, StoredScheme scheme) {
  const StoredFormat& f = stored_format(scheme);
  DZ_CHECK(f.value_bits == 4 && f.unit_bits == 8 && rows >= 0 && cols >= 0, "fp4_quantize: " << f.name);
  const int64_t g = f.block_cols, groups = (cols + g - 1) / g, row_bytes = (cols + 1) / 2;
  Fp4Packed r;
  r.packed.assign(static_cast<size_t>(rows * row_bytes), 0);
  r.scale.assign(static_cast<size_t>(rows * groups), 0);
  const bool nv = scheme == StoredScheme::kNvfp4;
  if (nv) {
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(w[i]));
    r.global_scale = amax > 0.0f ? 448.0f * 6.0f / amax : 1.0f;
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t j0 = k * g, j1 = std::min(cols, j0 + g);
      float amax = 0.0f;
      for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(w[i * cols + j]));
      uint8_t sb;
      if (nv) {
        sb = f32_to_f8_e4m3_sat(amax / 6.0f * r.global_scale);
        if (sb == 0) sb = 0x38;  // an all-zero group: 1.0
      } else {
        const int e = amax > 0.0f ? std::ilogb(amax) - 2 : 0;
        sb = static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
      }
      r.scale[static_cast<size_t>(i * groups + k)] = sb;
      const float s = fp4_group_scale(f.scale, sb, r.global_scale);
      for (int64_t j = j0; j < j1; ++j) {
        const uint8_t c = f32_to_e2m1(w[i * cols + j] / s);
        r.packed[static_cast<size_t>(i * row_bytes + j / 2)] |= static_cast<uint8_t>(c << (4 * (j % 2)));
      }
    }
  return r;
}

}  // namespace dayzero::checkpoint
