// FP4 weights in their published layouts (checkpoint/fp4.h): one MXFP4 weight written as
// compressed-tensors mxfp4-pack-quantized, as gpt-oss fused experts (_blocks / _scales) and as
// DeepSeek-V4 routed experts (I8 .weight, F8_E8M0 .scale), and an NVFP4 one with its global
// scale, read whole and as row and column slices (one starting at an odd column), as stored and
// dequantised, against a decoder of this file's own (the spec's 16 E2M1 values, 2^(e - 127),
// f32(E4M3) / global); the records count the value bytes read. Every header check refuses its
// case with exit 2 naming the tensor: shapes, dtypes, scale counts, a missing companion, NaN
// scale bytes, a bad global scale, an expert outside the fused tensor.
#include "checkpoint/fp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "checkpoint/writer.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::bytes_of;
using test_util::expect_bad;
using test_util::TempDir;

const float kSpecE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// A weight [out, in] of random codes and scales, packed as the layouts store it.
struct Weight {
  int64_t out, in, g;
  bool nv;
  float global = 1.0f;
  std::vector<uint8_t> codes;  // [out, in]
  std::vector<uint8_t> scale;  // [out, in / g]
  Weight(int64_t o, int64_t i, bool nv_, uint32_t seed) : out(o), in(i), g(nv_ ? 16 : 32), nv(nv_) {
    codes.resize(static_cast<size_t>(out * in));
    for (auto& c : codes) seed = seed * 1664525u + 1013904223u, c = static_cast<uint8_t>(seed >> 28);
    scale.resize(static_cast<size_t>(out * ((in + g - 1) / g)));
    for (auto& s : scale)
      seed = seed * 1664525u + 1013904223u,
      s = nv ? static_cast<uint8_t>(1 + (seed >> 8) % 0x7e) : static_cast<uint8_t>(120 + (seed >> 8) % 16);
    if (!nv) scale[0] = 0, scale[1] = 254;  // 2^-127 and 2^127 (6 x 2^127 is infinite in f32)
    if (nv) global = 2.5f;
  }
  int64_t groups() const { return (in + g - 1) / g; }
  std::vector<uint8_t> packed() const {
    const int64_t rb = (in + 1) / 2;
    std::vector<uint8_t> p(static_cast<size_t>(out * rb), 0);
    for (int64_t i = 0; i < out; ++i)
      for (int64_t j = 0; j < in; ++j) p[i * rb + j / 2] |= static_cast<uint8_t>(codes[i * in + j] << (4 * (j % 2)));
    return p;
  }
  float group_scale(uint8_t s) const {
    if (!nv) return std::ldexp(1.0f, s - 127);
    const int e = (s >> 3) & 15, m = s & 7;
    return (e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7)) / global;
  }
  float value(int64_t i, int64_t j) const {
    return kSpecE2m1[codes[i * in + j]] * group_scale(scale[i * groups() + j / g]);
  }
};

Catalog open_catalog(const TempDir& dir, const SafetensorsWriter& w) {
  EXPECT_TRUE(w.write(dir.file("model.safetensors")).ok());
  auto c = Catalog::open(dir.path());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : Catalog{};
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Reads rows [r0, r1) x columns [c0, c1) as stored and dequantised and checks both against the
// test's decoder, and that the stored slice dequantises through the CPU kernel to the same bits.
void check_slice(const Catalog& c, const StoredLayout& l, const Weight& w, int dim, int64_t b, int64_t e,
                 const std::string& what) {
  ByteReader reader;
  WeightRecord rs, rd;
  auto st = load_fp4_as_stored(c, l, w.out, w.in, reader, &rs, dim, b, e);
  ASSERT_TRUE(st.ok()) << what << ": " << st.status().message();
  auto dq = load_fp4_dequant_f32(c, l, w.out, w.in, reader, &rd, dim, b, e);
  ASSERT_TRUE(dq.ok()) << what << ": " << dq.status().message();
  const int64_t r0 = dim == 0 ? b : 0, r1 = dim == 0 ? e : w.out, c0 = dim == 1 ? b : 0, c1 = dim == 1 ? e : w.in;
  const int64_t rows = r1 - r0, cols = c1 - c0;
  ASSERT_EQ(dq->shape(), (Shape{rows, cols})) << what;
  const StoredWeightSlice& a = *st;
  ASSERT_EQ(a.slice.col0, c0) << what;
  ASSERT_EQ(a.slice.cols, cols) << what;
  ASSERT_EQ(a.shape_error(), "") << what;
  if (rows > 0 && cols > 0) {  // control: scales of another dtype, values of another width
    StoredWeightSlice other = a;
    other.scale = Tensor::host(DType::kF32, a.scale.shape());
    EXPECT_NE(other.shape_error().find("scale"), std::string::npos) << what;
    other = a;
    other.values = Tensor::host(DType::kU8, {rows, a.values.dim(1) + 1});
    EXPECT_NE(other.shape_error().find("values"), std::string::npos) << what;
  }
  int64_t inf = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float want = w.value(r0 + i, c0 + j);
      inf += std::isinf(want);
      ASSERT_TRUE(same_bits(dq->f32()[i * cols + j], want)) << what << " (" << i << ", " << j << ")";
      const auto* q = static_cast<const uint8_t*>(a.values.data());
      ASSERT_EQ((q[i * a.values.dim(1) + j / 2] >> (4 * (j % 2))) & 15, w.codes[(r0 + i) * w.in + c0 + j]) << what;
    }
  EXPECT_EQ(rd.inf_count, inf) << what;
  EXPECT_EQ(rs.inf_count, inf) << what;
  EXPECT_EQ(rs.checksum, rd.checksum) << what;
  EXPECT_EQ(rs.bytes_read, rd.bytes_read) << what;
  // What a backend holds is the table's count: the bytes and scales read.
  EXPECT_EQ(a.slice.held_bytes(), static_cast<int64_t>(a.values.bytes() + a.scale.bytes()) + (w.nv ? 4 : 0)) << what;
  EXPECT_EQ(static_cast<int64_t>(rs.bytes_read), rows * a.values.dim(1)) << what;
  // The kernels' dequantise-rows on the stored slice: the loader's bits.
  const kernels::cpu::StoredWeight kw{a.slice.format->scheme, static_cast<const uint8_t*>(a.values.data()),
                                      a.scale.data(), a.values.dim(1), a.scale.dim(1), 0, a.slice.col0, 1, w.g, false,
                                      a.global_scale};
  std::vector<float> k(static_cast<size_t>(rows * cols));
  if (rows > 0 && cols > 0) kernels::cpu::dequantise_stored_rows(kw, cols, 0, rows, k.data());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_TRUE(same_bits(k[i], dq->f32()[i])) << what << " kernel " << i;
}

void check_layout(const Catalog& c, const StoredLayout& l, const Weight& w, const std::string& name) {
  check_slice(c, l, w, -1, 0, 0, name + " whole");
  check_slice(c, l, w, 0, 2, 5, name + " rows 2..5");
  check_slice(c, l, w, 1, 13, 45, name + " columns 13..45");
  check_slice(c, l, w, 1, 32, 64, name + " columns 32..64");
}

TEST(Fp4Load, ThreeMxfp4LayoutsGiveTheSpecsValues) {
  const Weight w(6, 64, false, 7);
  TempDir dir;
  SafetensorsWriter f;
  // compressed-tensors: U8 codes, U8 exponents.
  f.add("ct.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("ct.weight_scale", DType::kU8, {6, 2}, w.scale);
  // DeepSeek-V4: I8 codes, F8_E8M0 exponents.
  f.add("v4.w1.weight", DType::kI8, {6, 32}, w.packed());
  f.add("v4.w1.scale", DType::kF8_E8M0, {6, 2}, w.scale);
  // gpt-oss: three experts fused, ours is expert 1, [E, out, in / 32, 16] and [E, out, in / 32].
  const Weight other(6, 64, false, 99);
  std::vector<uint8_t> blocks, scales;
  for (const Weight* e : {&other, &w, &other}) {
    const auto p = e->packed();
    blocks.insert(blocks.end(), p.begin(), p.end());
    scales.insert(scales.end(), e->scale.begin(), e->scale.end());
  }
  f.add("gpt.down_proj_blocks", DType::kU8, {3, 6, 2, 16}, blocks);
  f.add("gpt.down_proj_scales", DType::kU8, {3, 6, 2}, scales);
  const Catalog c = open_catalog(dir, f);
  check_layout(c, compressed_tensors_layout("ct", stored_format(StoredScheme::kMxfp4)), w, "compressed-tensors");
  check_layout(c, own_name_layout("v4.w1.weight", "v4.w1.scale", stored_format(StoredScheme::kMxfp4), 1, 32), w,
               "deepseek-v4");
  check_layout(c, gpt_oss_fp4_layout("gpt.down_proj", 1), w, "gpt-oss expert 1");
  // Negative control: expert 0 is another weight.
  ByteReader reader;
  auto other_read = load_fp4_dequant_f32(c, gpt_oss_fp4_layout("gpt.down_proj", 0), 6, 64, reader, nullptr);
  ASSERT_TRUE(other_read.ok());
  EXPECT_FALSE(same_bits(other_read->f32()[70], w.value(1, 6)) && same_bits(other_read->f32()[71], w.value(1, 7)) &&
               same_bits(other_read->f32()[72], w.value(1, 8)));
}

TEST(Fp4Load, Nvfp4WithItsGlobalScale) {
  const Weight w(6, 64, true, 11);
  TempDir dir;
  SafetensorsWriter f;
  f.add("m.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("m.weight_scale", DType::kF8_E4M3, {6, 4}, w.scale);
  f.add("m.weight_global_scale", DType::kF32, {1}, bytes_of(std::vector<float>{w.global}));
  const Catalog c = open_catalog(dir, f);
  check_layout(c, compressed_tensors_layout("m", stored_format(StoredScheme::kNvfp4)), w, "nvfp4");
}

TEST(Fp4Load, QuantizerRoundTrips) {
  // Values on the grid of a group's scale come back exactly; the rest within half a step.
  std::vector<float> v(4 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  for (StoredScheme s : {StoredScheme::kMxfp4, StoredScheme::kNvfp4}) {
    const Fp4Packed p = fp4_quantize(v.data(), 4, 64, s);
    const StoredFormat& f = stored_format(s);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 64; ++j) {
        const uint8_t code = (p.packed[i * 32 + j / 2] >> (4 * (j % 2))) & 15;
        const float d = e2m1_to_f32(code) * fp4_group_scale(f.scale, p.scale[i * (64 / f.block_cols) + j / f.block_cols],
                                                           p.global_scale);
        err += (d - v[i * 64 + j]) * (d - v[i * 64 + j]);
        ref += v[i * 64 + j] * v[i * 64 + j];
      }
    // E2M1 keeps one bit of mantissa: a relative L2 error near 0.1 (printed below).
    std::printf("%s round trip: relative L2 %.4f\n", f.name, std::sqrt(err / ref));
    EXPECT_LT(std::sqrt(err / ref), 0.12) << f.name;
    EXPECT_GT(std::sqrt(err / ref), 0.0) << f.name;
  }
  EXPECT_EQ(f32_to_e2m1(0.25f), 0);   // a tie: to the even code (0)
  EXPECT_EQ(f32_to_e2m1(0.75f), 2);   // a tie between 0.5 (1) and 1 (2): even
  EXPECT_EQ(f32_to_e2m1(-5.0f), 14);  // a tie between 4 (6) and 6 (7): even, negative
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);  // saturates
}

TEST(Fp4Load, HeaderChecksNameTheTensor) {
  const Weight w(6, 64, false, 3);
  Weight nan_scale = w;
  nan_scale.scale[5] = 0xff;  // row 2, group 1
  const Weight nv(6, 64, true, 5);
  Weight nv_nan = nv;
  nv_nan.scale[9] = 0x7f;  // row 2, group 1
  TempDir dir;
  SafetensorsWriter f;
  f.add("ok.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("ok.weight_scale", DType::kU8, {6, 2}, w.scale);
  f.add("noscale.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("shape.weight_packed", DType::kU8, {6, 64}, std::vector<uint8_t>(6 * 64));
  f.add("shape.weight_scale", DType::kU8, {6, 2}, w.scale);
  f.add("dtype.weight_packed", DType::kI32, {6, 8}, std::vector<uint8_t>(6 * 32));
  f.add("dtype.weight_scale", DType::kU8, {6, 2}, w.scale);
  f.add("sdtype.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("sdtype.weight_scale", DType::kBF16, {6, 2}, std::vector<uint8_t>(24));
  f.add("count.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("count.weight_scale", DType::kU8, {6, 4}, std::vector<uint8_t>(24, 127));
  f.add("nan.weight_packed", DType::kU8, {6, 32}, w.packed());
  f.add("nan.weight_scale", DType::kU8, {6, 2}, nan_scale.scale);
  f.add("nv.weight_packed", DType::kU8, {6, 32}, nv.packed());
  f.add("nv.weight_scale", DType::kF8_E4M3, {6, 4}, nv_nan.scale);
  f.add("nv.weight_global_scale", DType::kF32, {1}, bytes_of(std::vector<float>{2.5f}));
  f.add("nvg.weight_packed", DType::kU8, {6, 32}, nv.packed());
  f.add("nvg.weight_scale", DType::kF8_E4M3, {6, 4}, nv.scale);
  f.add("nvg.weight_global_scale", DType::kF32, {1}, bytes_of(std::vector<float>{0.0f}));
  f.add("nvnog.weight_packed", DType::kU8, {6, 32}, nv.packed());
  f.add("nvnog.weight_scale", DType::kF8_E4M3, {6, 4}, nv.scale);
  f.add("gpt.up_blocks", DType::kU8, {2, 6, 2, 16}, std::vector<uint8_t>(2 * 6 * 32));
  f.add("gpt.up_scales", DType::kU8, {2, 6, 2}, std::vector<uint8_t>(24, 127));
  const Catalog c = open_catalog(dir, f);
  ByteReader r;
  const auto mx = [](const std::string& m) { return compressed_tensors_layout(m, stored_format(StoredScheme::kMxfp4)); };
  const auto nvl = [](const std::string& m) { return compressed_tensors_layout(m, stored_format(StoredScheme::kNvfp4)); };
  ASSERT_TRUE(load_fp4_as_stored(c, mx("ok"), 6, 64, r, nullptr).ok());  // control
  expect_bad(load_fp4_as_stored(c, mx("ok"), 6, 96, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'ok.weight_packed'", "expected shape [6, 48]"});
  expect_bad(load_fp4_as_stored(c, mx("noscale"), 6, 64, r, nullptr).status(), StatusCode::kNotFound,
             {"'noscale.weight_scale'", "'noscale.weight_packed'"});
  expect_bad(load_fp4_as_stored(c, mx("shape"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'shape.weight_packed'", "[6, 32]", "two codes a byte"});
  expect_bad(load_fp4_as_stored(c, mx("dtype"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'dtype.weight_packed'", "I32", "expected U8"});
  expect_bad(load_fp4_as_stored(c, mx("sdtype"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'sdtype.weight_scale'", "BF16", "U8 or F8_E8M0"});
  expect_bad(load_fp4_as_stored(c, mx("count"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'count.weight_scale'", "expected shape [6, 2]", "one scale per 32"});
  expect_bad(load_fp4_dequant_f32(c, mx("nan"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'nan.weight_scale'", "row 2, group 1", "NaN", "255"});
  // A row slice that does not hold the NaN scale reads.
  EXPECT_TRUE(load_fp4_dequant_f32(c, mx("nan"), 6, 64, r, nullptr, 0, 3, 6).ok());
  expect_bad(load_fp4_as_stored(c, nvl("nv"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'nv.weight_scale'", "row 2, group 1", "NaN"});
  expect_bad(load_fp4_as_stored(c, nvl("nvg"), 6, 64, r, nullptr).status(), StatusCode::kInvalidArgument,
             {"'nvg.weight_global_scale'", "not finite and positive"});
  expect_bad(load_fp4_as_stored(c, nvl("nvnog"), 6, 64, r, nullptr).status(), StatusCode::kNotFound,
             {"'nvnog.weight_global_scale'"});
  expect_bad(load_fp4_as_stored(c, mx("ok"), 6, 64, r, nullptr, 1, 10, 70).status(), StatusCode::kInvalidArgument,
             {"'ok.weight_packed'", "out of range"});
  expect_bad(load_fp4_as_stored(c, gpt_oss_fp4_layout("gpt.up", 2), 6, 64, r, nullptr).status(),
             StatusCode::kInvalidArgument, {"'gpt.up_blocks'", "no expert 2"});
  ASSERT_TRUE(load_fp4_as_stored(c, gpt_oss_fp4_layout("gpt.up", 1), 6, 64, r, nullptr).ok());  // control
  expect_bad(load_fp4_as_stored(c, gpt_oss_fp4_layout("gpt.up", 1), 6, 48, r, nullptr).status(),
             StatusCode::kInvalidArgument, {"'gpt.up_blocks'", "not whole blocks of 32"});
}

// quantization_config: the two formats as make-model writes them are read back; another
// compressed-tensors format is left to its own parser; each unsupported key refused naming it.
TEST(Fp4Config, ParsesTheTwoFormatsAndRefusesTheRest) {
  for (StoredScheme s : {StoredScheme::kMxfp4, StoredScheme::kNvfp4}) {
    nlohmann::json c = {{"quantization_config", fp4_quant_config(s, {"lm_head", "re:.*self_attn.*"})}};
    ASSERT_TRUE(is_fp4_quant_config(c));
    auto q = parse_fp4_quant(c, "config.json");
    ASSERT_TRUE(q.ok()) << q.status().message();
    ASSERT_TRUE(q->has_value());
    EXPECT_EQ((*q)->scheme, s);
    EXPECT_FALSE((*q)->quantizes("lm_head"));
    EXPECT_FALSE((*q)->quantizes("model.layers.0.self_attn.q_proj"));
    EXPECT_TRUE((*q)->quantizes("model.layers.0.mlp.experts.3.up_proj"));
  }
  nlohmann::json int4 = {{"quantization_config", fp4_quant_config(StoredScheme::kMxfp4, {})}};
  int4["quantization_config"]["format"] = "pack-quantized";
  EXPECT_FALSE(is_fp4_quant_config(int4));
  auto none = parse_fp4_quant(int4, "config.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const auto refused = [](const std::string& path, const nlohmann::json& value, const std::string& key) {
    nlohmann::json c = {{"quantization_config", fp4_quant_config(StoredScheme::kMxfp4, {})}};
    c["quantization_config"][nlohmann::json::json_pointer(path)] = value;
    expect_bad(parse_fp4_quant(c, "config.json").status(), StatusCode::kUnsupported, {key});
  };
  refused("/config_groups/group_0/weights/group_size", 16, "weights.group_size 16");
  refused("/config_groups/group_0/weights/type", "int", "weights.type \"int\"");
  refused("/config_groups/group_0/weights/strategy", "tensor_group", "weights.strategy");
  refused("/config_groups/group_0/input_activations", nlohmann::json{{"num_bits", 4}}, "input_activations");
  refused("/kv_cache_scheme", nlohmann::json{{"num_bits", 8}}, "kv_cache_scheme");
  nlohmann::json bad_re = {{"quantization_config", fp4_quant_config(StoredScheme::kMxfp4, {"re:("})}};
  expect_bad(parse_fp4_quant(bad_re, "config.json").status(), StatusCode::kInvalidArgument, {"'re:('", "does not compile"});
}

}  // namespace
}  // namespace dayzero::checkpoint
