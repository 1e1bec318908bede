// Block-FP8 dequantization: validate weight and scale, stream the owned F8 bytes to F32 with
// load_slice_f32 (exact widening), read the covering scale blocks, then scale in place.
#include "checkpoint/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/json.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Block indices [first, last) that cover element indices [begin, end) of a dimension.
std::pair<int64_t, int64_t> covering_blocks(int64_t begin, int64_t end, int64_t block) {
  if (begin >= end) return {begin / block, begin / block};
  return {begin / block, (end - 1) / block + 1};
}

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
    return Status::Unsupported(where + ".quant_method " + quoted(m) +
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

Result<Tensor> load_fp8_dequant_f32(const Catalog& catalog, const std::string& weight_name,
                                    const std::string& scale_name, const BlockQuant& quant,
                                    ByteReader& reader, WeightRecord* rec, int dim, int64_t begin,
                                    int64_t end, size_t staging_bytes) {
  // Everything is checked before the first read, so a bad checkpoint costs no I/O.
  const TensorInfo* w = catalog.find(weight_name);
  if (!w) return Status::NotFound(catalog.dir() + ": tensor " + quoted(weight_name) + " not found in the checkpoint");
  const std::string where = w->file + ": tensor " + quoted(weight_name) + " " + shape_str(w->shape);
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
    return Status::NotFound(where + ": dtype " + dtype_name(w->dtype) + " but its scale " + quoted(scale_name) +
                            " is not in the checkpoint " + catalog.dir());
  }
  const std::string swhere = s->file + ": tensor " + quoted(scale_name) + " " + shape_str(s->shape);
  if (s->dtype != DType::kF32 && s->dtype != DType::kBF16) {
    return Status::InvalidArgument(swhere + ": dtype " + dtype_name(s->dtype) + ", expected F32 or BF16 for the scale of " +
                                   quoted(weight_name));
  }
  const int64_t rows = w->shape[0], cols = w->shape[1];
  const Shape expect = {ceil_div(rows, br), ceil_div(cols, bc)};
  if (s->shape != expect) {
    return Status::InvalidArgument(swhere + ": expected shape " + shape_str(expect) + " for the scale of " +
                                   quoted(weight_name) + " " + shape_str(w->shape) + " in blocks of " + blocks);
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
  const int64_t n_rows = r1 - r0, n_cols = c1 - c0;

  // The scale blocks covering the slice: [sr1 - sr0, sc1 - sc0] of the scale.
  const auto [sr0, sr1] = covering_blocks(r0, r1, br);
  const auto [sc0, sc1] = covering_blocks(c0, c1, bc);
  WeightRecord srec;
  if (out.numel() > 0) {
    Result<Tensor> scale = Status::Internal("unset");
    if (dim == -1) scale = load_f32(catalog, scale_name, reader, &srec, staging_bytes);
    else if (dim == 0) scale = load_slice_f32(catalog, scale_name, 0, sr0, sr1, reader, &srec, staging_bytes);
    else scale = load_slice_f32(catalog, scale_name, 1, sc0, sc1, reader, &srec, staging_bytes);
    if (!scale.ok()) return scale.status();
    const float* sc = scale->f32();  // [sr1 - sr0, sc1 - sc0]
    const int64_t sc_cols = sc1 - sc0;
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
    *rec = std::move(wrec);
    rec->nan_count = nan_count;
    rec->inf_count = inf_count;
    rec->aux_bytes_read = srec.bytes_read;
  }
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
      scale[bi * n_bc + bj] = s;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) q[i * cols + j] = f32_to_f8_e4m3_sat(w[i * cols + j] / s);
    }
  }
  return {std::move(q), std::move(scale)};
}

}  // namespace dayzero::checkpoint
