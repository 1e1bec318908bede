// Block-FP8 loading: validate weight and scale, stream the owned F8 bytes to F32 with
// load_slice_f32 (exact widening), read the covering scale blocks, then scale in place
// (dequantised) or encode the values back to their F8 bytes (kept as stored).
#include "checkpoint/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/json.h"
#include "core/strings.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Result<std::optional<BlockQuant>> parse_block_quant_json(const json& config) {
  const std::string where = "config.json: quantization_config";
  if (!config.is_object()) return Status::InvalidArgument("config.json: not a JSON object");
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::optional<BlockQuant>{};
  const json& q = *it;
  if (!q.is_object()) return Status::InvalidArgument(where + " is " + std::string(json_kind(q)) + ", not an object");

  const auto method = q.find("quant_method");
  if (method == q.end() || !method->is_string())
    return Status::InvalidArgument(where + ".quant_method is missing or not a string");
  const std::string m = method->get<std::string>();
  if (m != "fp8") {
    return Status::Unsupported(where + ".quant_method " + single_quoted(m) +
                               " is not supported (only block-quantized \"fp8\")");
  }
  const auto fmt = q.find("fmt");
  if (fmt != q.end() && !(fmt->is_string() && (*fmt == "e4m3" || *fmt == "e5m2")))
    return Status::Unsupported(where + ".fmt " + json_excerpt(*fmt) + " is not supported (e4m3 or e5m2)");
  // Static activation scales come with input_scale tensors that this loader does not read.
  const auto act = q.find("activation_scheme");
  if (act != q.end() && !(act->is_string() && *act == "dynamic")) {
    return Status::Unsupported(where + ".activation_scheme " + json_excerpt(*act) +
                               " is not supported (only \"dynamic\")");
  }
  const auto block = q.find("weight_block_size");
  if (block == q.end() || block->is_null()) {
    return Status::Unsupported(where + ": fp8 without weight_block_size (per-tensor scales) is not supported");
  }
  const auto positive = [](const json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= (int64_t{1} << 31);
  };
  if (!block->is_array() || block->size() != 2 || !positive((*block)[0]) || !positive((*block)[1])) {
    return Status::InvalidArgument(where + ".weight_block_size " + json_excerpt(*block) +
                                   " is not two positive integers [rows, cols]");
  }
  return std::optional<BlockQuant>{BlockQuant{(*block)[0].get<int64_t>(), (*block)[1].get<int64_t>()}};
}

}  // namespace

Result<std::optional<BlockQuant>> parse_block_quant(const json& config) {
  try {
    return parse_block_quant_json(config);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("config.json: quantization_config: ") + e.what());
  }
}

namespace {

// The F8 values of the slice widened to f32 (exact), the scale blocks that cover it, where the
// slice starts, and the records of both reads. Shared by the dequantising and the as-stored load.
struct Fp8Parts {
  Tensor values;  // [n_rows, n_cols] f32, unscaled
  Tensor scale;   // [scale rows, scale cols] f32 covering the slice; undefined for an empty slice
  int64_t r0 = 0, c0 = 0, br = 0, bc = 0, sr0 = 0, sc0 = 0;
  DType dtype = DType::kF8_E4M3;
  WeightRecord wrec, srec;
};

Result<Fp8Parts> load_fp8_parts(const Catalog& catalog, const std::string& weight_name,
                                const std::string& scale_name, const BlockQuant& quant, ByteReader& reader,
                                int dim, int64_t begin, int64_t end, size_t staging_bytes) {
  // Everything is checked before the first read, so a bad checkpoint costs no I/O.
  const TensorInfo* w = catalog.find(weight_name);
  if (!w) return Status::NotFound(catalog.dir() + ": tensor " + single_quoted(weight_name) + " not found in the checkpoint");
  const std::string where = w->file + ": tensor " + single_quoted(weight_name) + " " + shape_str(w->shape);
  if (w->dtype != DType::kF8_E4M3 && w->dtype != DType::kF8_E5M2) {
    return Status::InvalidArgument(where + ": dtype " + dtype_name(w->dtype) +
                                   ", expected F8_E4M3 or F8_E5M2 for a block-quantized weight");
  }
  if (w->shape.size() != 2) return Status::InvalidArgument(where + ": a block-quantized weight must be 2-D");
  const int64_t br = quant.block_rows, bc = quant.block_cols;
  const std::string blocks = "[" + std::to_string(br) + ", " + std::to_string(bc) + "]";
  if (br <= 0 || bc <= 0) return Status::InvalidArgument(where + ": block size " + blocks + " must be positive");
  const TensorInfo* s = catalog.find(scale_name);
  if (!s) {
    return Status::NotFound(where + ": dtype " + dtype_name(w->dtype) + " but its scale " + single_quoted(scale_name) +
                            " is not in the checkpoint " + catalog.dir());
  }
  const std::string swhere = s->file + ": tensor " + single_quoted(scale_name) + " " + shape_str(s->shape);
  if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF8_E8M0) {
    return Status::InvalidArgument(swhere + ": dtype " + dtype_name(s->dtype) +
                                   ", expected F32, BF16 or F8_E8M0 for the scale of " + single_quoted(weight_name));
  }
  const int64_t rows = w->shape[0], cols = w->shape[1];
  const Shape expect = {ceil_div(rows, br), ceil_div(cols, bc)};
  if (s->shape != expect) {
    return Status::InvalidArgument(swhere + ": expected shape " + shape_str(expect) + " for the scale of " +
                                   single_quoted(weight_name) + " " + shape_str(w->shape) + " in blocks of " + blocks);
  }
  int64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols;
  if (dim != -1) {
    if (dim != 0 && dim != 1) {
      return Status::InvalidArgument(where + ": can only slice dim 0 or 1 (or -1: whole), not " + std::to_string(dim));
    }
    if (begin < 0 || begin > end || end > w->shape[dim]) {
      return Status::InvalidArgument(where + ": slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") of dim " + std::to_string(dim) + " is out of range");
    }
    (dim == 0 ? r0 : c0) = begin;
    (dim == 0 ? r1 : c1) = end;
  }

  WeightRecord wrec;
  Result<Tensor> loaded = dim == -1 ? load_f32(catalog, weight_name, reader, &wrec, staging_bytes)
                                    : load_slice_f32(catalog, weight_name, dim, begin, end, reader, &wrec, staging_bytes);
  if (!loaded.ok()) return loaded.status();
  Tensor out = std::move(loaded).value();  // [r1 - r0, c1 - c0]

  // The scale blocks covering the slice: [sr1 - sr0, sc1 - sc0] of the scale.
  const auto [sr0, sr1] = covering_blocks(r0, r1, br);
  const auto [sc0, sc1] = covering_blocks(c0, c1, bc);
  WeightRecord srec;
  Fp8Parts parts;
  if (out.numel() > 0) {
    Result<Tensor> scale = Status::Internal("unset");
    if (dim == -1) scale = load_f32(catalog, scale_name, reader, &srec, staging_bytes);
    else if (dim == 0) scale = load_slice_f32(catalog, scale_name, 0, sr0, sr1, reader, &srec, staging_bytes);
    else scale = load_slice_f32(catalog, scale_name, 1, sc0, sc1, reader, &srec, staging_bytes);
    if (!scale.ok()) return scale.status();
    parts.scale = std::move(scale).value();
  }
  parts.values = std::move(out);
  parts.r0 = r0;
  parts.c0 = c0;
  parts.br = br;
  parts.bc = bc;
  parts.sr0 = sr0;
  parts.sc0 = sc0;
  parts.dtype = w->dtype;
  parts.wrec = std::move(wrec);
  parts.srec = std::move(srec);
  return parts;
}

// The record of the weight: the F8 read's, with NaN/Inf counted over the dequantised values.
void finish_record(Fp8Parts& p, int64_t nan_count, int64_t inf_count, WeightRecord* rec) {
  if (!rec) return;
  *rec = std::move(p.wrec);
  rec->nan_count = nan_count;
  rec->inf_count = inf_count;
  rec->aux_bytes_read = p.srec.bytes_read;
}

}  // namespace

Result<Tensor> load_fp8_dequant_f32(const Catalog& catalog, const std::string& weight_name,
                                    const std::string& scale_name, const BlockQuant& quant,
                                    ByteReader& reader, WeightRecord* rec, int dim, int64_t begin,
                                    int64_t end, size_t staging_bytes) {
  DZ_ASSIGN_OR_RETURN(Fp8Parts p, load_fp8_parts(catalog, weight_name, scale_name, quant, reader, dim, begin, end,
                                                 staging_bytes));
  Tensor out = std::move(p.values);
  const int64_t n_rows = out.dim(0), n_cols = out.dim(1), r0 = p.r0, c0 = p.c0, c1 = c0 + n_cols;
  const int64_t br = p.br, bc = p.bc, sr0 = p.sr0, sc0 = p.sc0;
  if (out.numel() > 0) {
    const float* sc = p.scale.f32();  // [sr1 - sr0, sc1 - sc0]
    const int64_t sc_cols = p.scale.dim(1);
    float* dst = out.f32();
    for (int64_t i = 0; i < n_rows; ++i) {
      const float* srow = sc + ((r0 + i) / br - sr0) * sc_cols;
      float* row = dst + i * n_cols;
      // One run per block column: a constant factor over contiguous elements vectorises.
      for (int64_t j = c0; j < c1;) {
        const int64_t blk = j / bc, run_end = std::min(c1, (blk + 1) * bc);
        const float f = srow[blk - sc0];
        for (int64_t k = j; k < run_end; ++k) row[k - c0] *= f;
        j = run_end;
      }
    }
  }
  if (rec) {
    // The loaded record counted the F8 values; the scale can turn finite ones into Inf or NaN.
    int64_t nan_count = 0, inf_count = 0;
    const float* v = out.f32();
    for (int64_t i = 0; i < out.numel(); ++i) {
      nan_count += std::isnan(v[i]);
      inf_count += std::isinf(v[i]);
    }
    finish_record(p, nan_count, inf_count, rec);
  }
  return out;
}

Result<StoredWeightSlice> load_fp8_as_stored(const Catalog& catalog, const std::string& weight_name,
                                       const std::string& scale_name, const BlockQuant& quant, ByteReader& reader,
                                       WeightRecord* rec, int dim, int64_t begin, int64_t end,
                                       size_t staging_bytes) {
  DZ_ASSIGN_OR_RETURN(Fp8Parts p, load_fp8_parts(catalog, weight_name, scale_name, quant, reader, dim, begin, end,
                                                 staging_bytes));
  const int64_t n_rows = p.values.dim(0), n_cols = p.values.dim(1);
  StoredWeightSlice out;
  out.slice = {&stored_format(StoredScheme::kFp8Block), n_rows, n_cols, p.r0, p.c0, p.br, p.bc};
  const bool e5m2 = p.dtype == DType::kF8_E5M2;
  out.values = Tensor::host_uninitialized(p.dtype, {n_rows, n_cols});
  out.scale = p.scale.defined() ? std::move(p.scale) : Tensor::host(DType::kF32, {0, 0});
  // Every F8 value is exact in f32, so encoding the widened value again gives the stored byte
  // back (a NaN keeps its sign, not its payload; the loader refuses NaN weights anyway).
  auto* q = static_cast<uint8_t*>(out.values.data());
  const float* v = p.values.f32();
  int64_t nan_count = 0, inf_count = 0;
  const float* sc = out.scale.numel() > 0 ? out.scale.f32() : nullptr;
  const int64_t sc_cols = out.scale.numel() > 0 ? out.scale.dim(1) : 0;
  for (int64_t i = 0; i < n_rows; ++i)
    for (int64_t j = 0; j < n_cols; ++j) {
      const float x = v[i * n_cols + j];
      q[i * n_cols + j] = e5m2 ? static_cast<uint8_t>(f32_to_f16(x) >> 8) : f32_to_f8_e4m3_sat(x);
      const float d = x * sc[((p.r0 + i) / p.br - p.sr0) * sc_cols + (p.c0 + j) / p.bc - p.sc0];
      nan_count += std::isnan(d);
      inf_count += std::isinf(d);
    }
  finish_record(p, nan_count, inf_count, rec);
  return out;
}

uint8_t f32_to_f8_e4m3_sat(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;   // NaN
  if (abs >= 0x43e00000u) return sign | 0x7e;  // >= 448, Inf included: saturate
  if (abs < 0x3c800000u) {
    // Below 2^-6 E4M3 is subnormal, m * 2^-9: scaling by 2^9 is exact, then round to nearest
    // even. m = 8 rounds up into the smallest normal, whose code is also 8.
    float a;
    std::memcpy(&a, &abs, 4);
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  const uint32_t exp = (abs >> 23) - 127 + 7;  // 2^-6 .. 2^8: biased 1..15
  const uint32_t mant = abs & 0x7fffffu;
  uint32_t h = (exp << 3) | (mant >> 20);
  const uint32_t rest = mant & 0xfffffu;
  // May carry into the exponent; below 448 it never reaches 0x7f (NaN): 448 is 0x7e and the
  // values up to it round to at most that.
  if (rest > 0x80000u || (rest == 0x80000u && (h & 1))) ++h;
  return sign | static_cast<uint8_t>(h);
}

std::pair<std::vector<uint8_t>, std::vector<float>> quantize_fp8_blocks(const float* w, int64_t rows,
                                                                        int64_t cols, const BlockQuant& quant) {
  const int64_t br = quant.block_rows, bc = quant.block_cols;
  DZ_CHECK(rows >= 0 && cols >= 0 && br > 0 && bc > 0,
           "rows " << rows << " cols " << cols << " blocks " << br << "x" << bc);
  const int64_t n_br = ceil_div(rows, br), n_bc = ceil_div(cols, bc);
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));  // [rows, cols]
  std::vector<float> scale(static_cast<size_t>(n_br * n_bc));  // [n_br, n_bc]
  for (int64_t bi = 0; bi < n_br; ++bi) {
    const int64_t i0 = bi * br, i1 = std::min(rows, i0 + br);
    for (int64_t bj = 0; bj < n_bc; ++bj) {
      const int64_t j0 = bj * bc, j1 = std::min(cols, j0 + bc);
      float amax = 0.0f;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          if (std::isfinite(w[i * cols + j])) amax = std::max(amax, std::fabs(w[i * cols + j]));
      float s = amax / kF8E4M3Max;
      if (s == 0.0f) s = 1.0f;  // an all-zero block (or amax so small the scale underflows)
      if (quant.pow2_scales) s = std::exp2(std::ceil(std::log2(s)));  // the power of two at or above: no overflow
      scale[bi * n_bc + bj] = s;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) q[i * cols + j] = f32_to_f8_e4m3_sat(w[i * cols + j] / s);
    }
  }
  return {std::move(q), std::move(scale)};
}

}  // namespace dayzero::checkpoint
