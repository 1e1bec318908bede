// Block-FP8 checkpoints: hand-computed dequantized values, partial edge blocks, slices across
// block boundaries equal to the matching part of the whole tensor, NaN/Inf, validation of weight
// and scale, quantization_config parsing, and the E4M3 quantizer used to write test models.
#include "checkpoint/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "checkpoint/writer.h"
#include "checkpoint/xxhash.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using nlohmann::json;
using test_util::bytes_of;
using test_util::expect_bad;
using test_util::TempDir;

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// Bit-exact comparison (NaN payloads included) that names the first mismatches.
void expect_same_bits(const float* got, const float* want, int64_t n, const std::string& what) {
  int shown = 0;
  for (int64_t i = 0; i < n && shown < 5; ++i) {
    if (bits(got[i]) != bits(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
      ++shown;
    }
  }
}

std::vector<uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  convert_from_f32(DType::kBF16, v.data(), out.data(), v.size());
  return out;
}

Catalog open_catalog(const TempDir& dir, const SafetensorsWriter& w) {
  EXPECT_TRUE(w.write(dir.file("model.safetensors")).ok());
  auto c = Catalog::open(dir.path());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : Catalog{};
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

// A [3, 4] weight in 2x2 blocks (scale [2, 2]; the last block row is partial), checked against
// values worked out by hand.
TEST(Fp8Test, HandComputedSmallBlocks) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("x.weight", DType::kF8_E4M3, {3, 4},
        {0x38, 0x40, 0x30, 0xb8,    // 1, 2, 0.5, -1
         0x3c, 0x7e, 0x01, 0x44,    // 1.5, 448, 2^-9, 3
         0x48, 0xc0, 0x7f, 0x00});  // 4, -2, NaN, 0
  w.add("x.weight_scale_inv", DType::kF32, {2, 2}, bytes_of(std::vector<float>{0.5f, 3.0f, 0.1f, 1024.0f}));
  const Catalog catalog = open_catalog(dir, w);
  ByteReader reader;
  WeightRecord rec;
  auto t = load_fp8_dequant_f32(catalog, "x.weight", "x.weight_scale_inv", {2, 2}, reader, &rec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->shape(), (Shape{3, 4}));
  const std::vector<float> v = values(*t);
  const std::vector<float> want = {0.5f, 1.0f, 1.5f, -3.0f, 0.75f, 224.0f, 3.0f / 512, 9.0f, 0.4f, -0.2f, NAN, 0.0f};
  for (int i = 0; i < 12; ++i) {
    if (i == 10) {
      EXPECT_TRUE(std::isnan(v[i]));
    }
    else EXPECT_EQ(v[i], want[i]) << "element " << i;
  }
  EXPECT_EQ(rec.name, "x.weight");
  EXPECT_EQ(rec.dtype, DType::kF8_E4M3);
  EXPECT_EQ(rec.bytes_read, 12u);
  EXPECT_EQ(rec.aux_bytes_read, 16u);
  EXPECT_EQ(rec.nan_count, 1);
  EXPECT_EQ(rec.inf_count, 0);
}

constexpr int64_t kRows = 200, kCols = 300, kBlock = 128;  // scale [2, 3]: partial last blocks

// [200, 300] E4M3 weight cycling through all 256 codes (NaN 0x7f/0xff included), 128x128
// blocks, six distinct scales; plus a few known bytes at block corners.
class Fp8BlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    q_.resize(kRows * kCols);
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kCols; ++j) q_[i * kCols + j] = static_cast<uint8_t>((i * 31 + j * 7) % 256);
    q_[127 * kCols + 127] = 0x38;  // 1    in block [0][0]
    q_[127 * kCols + 128] = 0xb8;  // -1   in block [0][1]
    q_[0 * kCols + 256] = 0x40;    // 2    in block [0][2]
    q_[128 * kCols + 127] = 0x3c;  // 1.5  in block [1][0]
    q_[128 * kCols + 128] = 0x30;  // 0.5  in block [1][1]
    q_[199 * kCols + 299] = 0x38;  // 1    in block [1][2]
    scale_ = {0.5f, 2.0f, 0.125f, 3.0f, 0.1f, 1e-3f};
    SafetensorsWriter w;
    w.add("m.weight", DType::kF8_E4M3, {kRows, kCols}, q_);
    w.add("m.weight_scale_inv", DType::kF32, {2, 3}, bytes_of(scale_));
    w.add("m_bf16.weight", DType::kF8_E4M3, {kRows, kCols}, q_);
    w.add("m_bf16.weight_scale_inv", DType::kBF16, {2, 3}, bf16_bytes(scale_));
    catalog_ = open_catalog(dir_, w);
    // The plain-loop twin: one f32 multiply per element.
    want_.resize(kRows * kCols);
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kCols; ++j)
        want_[i * kCols + j] = f8_e4m3_to_f32(q_[i * kCols + j]) * scale_[(i / kBlock) * 3 + j / kBlock];
  }

  Result<Tensor> load(int dim = -1, int64_t begin = 0, int64_t end = 0, WeightRecord* rec = nullptr,
                      const std::string& prefix = "m", size_t staging = kDefaultStagingBytes) {
    return load_fp8_dequant_f32(catalog_, prefix + ".weight", prefix + ".weight_scale_inv", {}, reader_, rec, dim,
                                begin, end, staging);
  }

  TempDir dir_;
  Catalog catalog_;
  ByteReader reader_;
  std::vector<uint8_t> q_;   // [kRows, kCols]
  std::vector<float> scale_;  // [2, 3]
  std::vector<float> want_;   // [kRows, kCols]
};

TEST_F(Fp8BlockTest, WholeTensorWithPartialEdgeBlocks) {
  WeightRecord rec;
  auto t = load(-1, 0, 0, &rec);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->shape(), (Shape{kRows, kCols}));
  const float* v = t->f32();
  EXPECT_EQ(v[127 * kCols + 127], 0.5f);
  EXPECT_EQ(v[127 * kCols + 128], -2.0f);
  EXPECT_EQ(v[0 * kCols + 256], 0.25f);
  EXPECT_EQ(v[128 * kCols + 127], 4.5f);
  EXPECT_EQ(v[128 * kCols + 128], 0.05f);
  EXPECT_EQ(v[199 * kCols + 299], 1e-3f);
  expect_same_bits(v, want_.data(), kRows * kCols, "whole");
  int64_t nans = 0;
  for (float x : want_) nans += std::isnan(x);
  EXPECT_GT(nans, 0);
  EXPECT_EQ(rec.nan_count, nans);
  EXPECT_EQ(rec.inf_count, 0);
  EXPECT_EQ(rec.shape, (Shape{kRows, kCols}));
  EXPECT_EQ(rec.bytes_read, uint64_t(kRows * kCols));
  EXPECT_EQ(rec.checksum, xxh64(q_.data(), q_.size()));
  ASSERT_EQ(rec.ranges.size(), 1u);
  EXPECT_EQ(rec.ranges[0].first, catalog_.find("m.weight")->offset);
  EXPECT_EQ(rec.aux_bytes_read, 24u);
}

TEST_F(Fp8BlockTest, Bf16ScaleAndSmallStagingGiveSameValues) {
  // Every scale here but 0.1 and 1e-3 is exact in BF16; compare with the BF16-rounded scales.
  std::vector<float> s16(6);
  const auto raw = bf16_bytes(scale_);
  convert_to_f32(DType::kBF16, raw.data(), s16.data(), 6);
  std::vector<float> want(kRows * kCols);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j)
      want[i * kCols + j] = f8_e4m3_to_f32(q_[i * kCols + j]) * s16[(i / kBlock) * 3 + j / kBlock];
  WeightRecord rec;
  auto t = load(-1, 0, 0, &rec, "m_bf16", 64);
  ASSERT_TRUE(t.ok()) << t.status().message();
  expect_same_bits(t->f32(), want.data(), kRows * kCols, "bf16 scale");
  EXPECT_EQ(rec.aux_bytes_read, 12u);
  auto small = load(1, 100, 250, nullptr, "m", 16);
  ASSERT_TRUE(small.ok());
  auto big = load(1, 100, 250);
  ASSERT_TRUE(big.ok());
  expect_same_bits(small->f32(), big->f32(), big->numel(), "staging 16 bytes");
}

TEST_F(Fp8BlockTest, Dim0SlicesAcrossBlocksMatchWhole) {
  const std::pair<int64_t, int64_t> cases[] = {{0, 200}, {100, 190}, {128, 200}, {127, 129}, {0, 128},
                                               {0, 1},   {199, 200}, {5, 5},     {200, 200}};
  for (const auto& [b, e] : cases) {
    const std::string what = "rows [" + std::to_string(b) + ", " + std::to_string(e) + ")";
    WeightRecord rec;
    auto t = load(0, b, e, &rec);
    ASSERT_TRUE(t.ok()) << what << ": " << t.status().message();
    ASSERT_EQ(t->shape(), (Shape{e - b, kCols})) << what;
    expect_same_bits(t->f32(), want_.data() + b * kCols, (e - b) * kCols, what);
    EXPECT_EQ(rec.bytes_read, uint64_t((e - b) * kCols)) << what;
    EXPECT_EQ(rec.checksum, xxh64(q_.data() + b * kCols, (e - b) * kCols)) << what;
    EXPECT_LE(rec.ranges.size(), 1u) << what;
    const int64_t blocks = e > b ? (e - 1) / kBlock - b / kBlock + 1 : 0;  // scale rows covering
    EXPECT_EQ(rec.aux_bytes_read, uint64_t(blocks * 3 * 4)) << what;
  }
}

TEST_F(Fp8BlockTest, Dim1SlicesAcrossBlocksMatchWhole) {
  const std::pair<int64_t, int64_t> cases[] = {{0, 300}, {100, 250}, {256, 300}, {127, 129},
                                               {128, 256}, {299, 300}, {7, 7}};
  for (const auto& [b, e] : cases) {
    const std::string what = "cols [" + std::to_string(b) + ", " + std::to_string(e) + ")";
    WeightRecord rec;
    auto t = load(1, b, e, &rec);
    ASSERT_TRUE(t.ok()) << what << ": " << t.status().message();
    ASSERT_EQ(t->shape(), (Shape{kRows, e - b})) << what;
    std::vector<float> want;
    std::vector<uint8_t> read;  // the weight bytes read, in order
    for (int64_t i = 0; i < kRows; ++i) {
      want.insert(want.end(), want_.begin() + i * kCols + b, want_.begin() + i * kCols + e);
      read.insert(read.end(), q_.begin() + i * kCols + b, q_.begin() + i * kCols + e);
    }
    expect_same_bits(t->f32(), want.data(), kRows * (e - b), what);
    EXPECT_EQ(rec.bytes_read, uint64_t(kRows * (e - b))) << what;
    EXPECT_EQ(rec.checksum, xxh64(read.data(), read.size())) << what;
    const int64_t blocks = e > b ? (e - 1) / kBlock - b / kBlock + 1 : 0;  // scale cols covering
    EXPECT_EQ(rec.aux_bytes_read, uint64_t(2 * blocks * 4)) << what;
  }
}

// Odd block sizes ([3, 5] over [7, 11]: scale [3, 3]) and every slice of both dimensions.
TEST(Fp8Test, EverySliceOfOddBlocksMatchesWhole) {
  constexpr int64_t R = 7, C = 11;
  std::vector<uint8_t> q(R * C);
  for (int64_t i = 0; i < R * C; ++i) q[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  const std::vector<float> scale = {0.5f, 3.0f, 0.1f, 7.0f, 1e-2f, 0.25f, 2.0f, 1.5f, 1e3f};
  TempDir dir;
  SafetensorsWriter w;
  w.add("w", DType::kF8_E4M3, {R, C}, q);
  w.add("s", DType::kF32, {3, 3}, bytes_of(scale));
  const Catalog catalog = open_catalog(dir, w);
  ByteReader reader;
  const BlockQuant quant{3, 5};
  auto whole = load_fp8_dequant_f32(catalog, "w", "s", quant, reader, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  std::vector<float> want(R * C);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) want[i * C + j] = f8_e4m3_to_f32(q[i * C + j]) * scale[(i / 3) * 3 + j / 5];
  expect_same_bits(whole->f32(), want.data(), R * C, "whole");
  for (int dim = 0; dim < 2; ++dim) {
    const int64_t n = dim == 0 ? R : C;
    for (int64_t b = 0; b <= n; ++b) {
      for (int64_t e = b; e <= n; ++e) {
        const std::string what = "dim " + std::to_string(dim) + " [" + std::to_string(b) + ", " + std::to_string(e) + ")";
        auto t = load_fp8_dequant_f32(catalog, "w", "s", quant, reader, nullptr, dim, b, e, 8);
        ASSERT_TRUE(t.ok()) << what << ": " << t.status().message();
        std::vector<float> part;
        for (int64_t i = 0; i < R; ++i)
          for (int64_t j = 0; j < C; ++j)
            if ((dim == 0 ? i : j) >= b && (dim == 0 ? i : j) < e) part.push_back(want[i * C + j]);
        ASSERT_EQ(t->numel(), static_cast<int64_t>(part.size())) << what;
        expect_same_bits(t->f32(), part.data(), t->numel(), what);
      }
    }
  }
}

// Kept as stored: every slice's bytes are the checkpoint's bytes, its scales the blocks that
// cover it, its record the dequantising load's, and dequantising it with the slice's offset
// into its first block (what the CUDA backend does before a GEMM) gives that load's values.
TEST(Fp8Test, EverySliceAsStoredIsTheStoredBytesAndCoveringScales) {
  constexpr int64_t R = 7, C = 11;
  for (const DType dt : {DType::kF8_E4M3, DType::kF8_E5M2}) {
    std::vector<uint8_t> q(R * C);
    for (int64_t i = 0; i < R * C; ++i) {
      q[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
      // E5M2 NaNs keep only their sign through f32 (the loader refuses NaN weights anyway).
      if (dt == DType::kF8_E5M2 && (q[i] & 0x7f) > 0x7c) q[i] = 0x3c;
    }
    const std::vector<float> scale = {0.5f, 3.0f, 0.1f, 7.0f, 1e-2f, 0.25f, 2.0f, 1.5f, 1e3f};
    TempDir dir;
    SafetensorsWriter w;
    w.add("w", dt, {R, C}, q);
    w.add("s", DType::kF32, {3, 3}, bytes_of(scale));
    const Catalog catalog = open_catalog(dir, w);
    ByteReader reader;
    const BlockQuant quant{3, 5};
    for (int dim = -1; dim < 2; ++dim) {
      const int64_t n = dim == 0 ? R : dim == 1 ? C : 1;
      for (int64_t b = 0; b <= n; ++b)
        for (int64_t e = b; e <= n; ++e) {
          if (dim == -1 && (b != 0 || e != 0)) continue;
          const std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + " [" +
                                   std::to_string(b) + ", " + std::to_string(e) + ")";
          WeightRecord ra, rd;
          auto a = load_fp8_as_stored(catalog, "w", "s", quant, reader, &ra, dim, b, e, 8);
          auto d = load_fp8_dequant_f32(catalog, "w", "s", quant, reader, &rd, dim, b, e, 8);
          ASSERT_TRUE(a.ok() && d.ok()) << what;
          const StoredSlice& sl = a->slice;
          ASSERT_EQ(a->values.shape(), d->shape()) << what;
          EXPECT_EQ(a->values.dtype(), dt);
          EXPECT_EQ(a->held_dtype(), dt);
          EXPECT_EQ(ra.checksum, rd.checksum) << what;
          EXPECT_EQ(ra.bytes_read, rd.bytes_read) << what;
          EXPECT_EQ(ra.aux_bytes_read, rd.aux_bytes_read) << what;
          EXPECT_EQ(ra.nan_count, rd.nan_count) << what;
          EXPECT_EQ(ra.inf_count, rd.inf_count) << what;
          if (sl.rows * sl.cols == 0) continue;
          EXPECT_EQ(a->scale.numel(), sl.scale_rows() * sl.scale_cols()) << what;
          EXPECT_EQ(a->scale.numel() * sl.format->scale_bytes, static_cast<int64_t>(ra.aux_bytes_read)) << what;
          const auto* got = static_cast<const uint8_t*>(a->values.data());
          std::vector<float> deq(static_cast<size_t>(sl.rows * sl.cols));
          for (int64_t i = 0; i < sl.rows; ++i)
            for (int64_t j = 0; j < sl.cols; ++j) {
              ASSERT_EQ(got[i * sl.cols + j], q[(sl.row0 + i) * C + sl.col0 + j]) << what << " at " << i << "," << j;
              const int64_t si = (sl.row0 % quant.block_rows + i) / quant.block_rows;
              const int64_t sj = (sl.col0 % quant.block_cols + j) / quant.block_cols;
              const float v = dt == DType::kF8_E5M2 ? f8_e5m2_to_f32(got[i * sl.cols + j]) : f8_e4m3_to_f32(got[i * sl.cols + j]);
              deq[i * sl.cols + j] = v * a->scale.f32()[si * sl.scale_cols() + sj];
            }
          expect_same_bits(deq.data(), d->f32(), d->numel(), what);
        }
    }
  }
}

TEST(Fp8Test, NanEncodingsAndNonFiniteScales) {
  TempDir dir;
  SafetensorsWriter w;
  // E4M3 has no Inf: S.1111.111 is NaN. A scale of +Inf makes 0 NaN and 1 Inf.
  w.add("a", DType::kF8_E4M3, {2, 2}, {0x7f, 0xff, 0x00, 0x38});
  w.add("a_s", DType::kF32, {2, 1}, bytes_of(std::vector<float>{1.0f, INFINITY}));
  // E5M2 has Inf (0x7c, 0xfc) and NaN (0x7e).
  w.add("b", DType::kF8_E5M2, {1, 4}, {0x7c, 0xfc, 0x7e, 0x3c});
  w.add("b_s", DType::kF32, {1, 1}, bytes_of(std::vector<float>{2.0f}));
  const Catalog catalog = open_catalog(dir, w);
  ByteReader reader;
  WeightRecord rec;
  auto a = load_fp8_dequant_f32(catalog, "a", "a_s", {1, 2}, reader, &rec);
  ASSERT_TRUE(a.ok()) << a.status().message();
  const auto av = values(*a);
  EXPECT_TRUE(std::isnan(av[0]) && std::isnan(av[1]) && std::isnan(av[2]));
  EXPECT_EQ(av[3], INFINITY);
  EXPECT_EQ(rec.nan_count, 3);
  EXPECT_EQ(rec.inf_count, 1);
  auto b = load_fp8_dequant_f32(catalog, "b", "b_s", {128, 128}, reader, &rec);
  ASSERT_TRUE(b.ok()) << b.status().message();
  const auto bv = values(*b);
  EXPECT_EQ(bv[0], INFINITY);
  EXPECT_EQ(bv[1], -INFINITY);
  EXPECT_TRUE(std::isnan(bv[2]));
  EXPECT_EQ(bv[3], 2.0f);
  EXPECT_EQ(rec.dtype, DType::kF8_E5M2);
  EXPECT_EQ(rec.nan_count, 1);
  EXPECT_EQ(rec.inf_count, 2);
}

// Every bad input is reported before any byte is read.
TEST(Fp8Test, BadWeightsAndScalesRejectedWithoutReading) {
  TempDir dir;
  SafetensorsWriter w;
  const std::vector<uint8_t> q(kRows * kCols, 0x38);
  const auto f32s = [](int64_t n) { return bytes_of(std::vector<float>(n, 1.0f)); };
  w.add("ok.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("ok.weight_scale_inv", DType::kF32, {2, 3}, f32s(6));
  w.add("lone.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("rows.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("rows.weight_scale_inv", DType::kF32, {3, 3}, f32s(9));
  w.add("cols.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("cols.weight_scale_inv", DType::kF32, {2, 2}, f32s(4));
  w.add("flat.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("flat.weight_scale_inv", DType::kF32, {6}, f32s(6));
  w.add("f16s.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  w.add("f16s.weight_scale_inv", DType::kF16, {2, 3}, std::vector<uint8_t>(12, 0));
  w.add("bf16.weight", DType::kBF16, {2, 2}, std::vector<uint8_t>(8, 0));
  w.add("bf16.weight_scale_inv", DType::kF32, {1, 1}, f32s(1));
  w.add("cube.weight", DType::kF8_E4M3, {2, 2, 2}, std::vector<uint8_t>(8, 0x38));
  w.add("cube.weight_scale_inv", DType::kF32, {1, 1}, f32s(1));
  const Catalog catalog = open_catalog(dir, w);
  ByteReader reader;
  const auto run = [&](const std::string& p, BlockQuant quant = {}, int dim = -1, int64_t b = 0, int64_t e = 0) {
    return load_fp8_dequant_f32(catalog, p + ".weight", p + ".weight_scale_inv", quant, reader, nullptr, dim, b, e)
        .status();
  };
  const std::string file = dir.file("model.safetensors");
  const StatusCode bad = StatusCode::kInvalidArgument;
  expect_bad(run("none"), StatusCode::kNotFound, {"'none.weight'", dir.path()});
  expect_bad(run("lone"), StatusCode::kNotFound, {"'lone.weight'", "'lone.weight_scale_inv'", file});
  expect_bad(run("rows"), bad, {"'rows.weight_scale_inv'", "[3, 3]", "expected shape [2, 3]", "'rows.weight'", file});
  expect_bad(run("cols"), bad, {"'cols.weight_scale_inv'", "[2, 2]", "expected shape [2, 3]"});
  expect_bad(run("flat"), bad, {"'flat.weight_scale_inv'", "[6]", "expected shape [2, 3]"});
  expect_bad(run("ok", {64, 128}), bad, {"'ok.weight_scale_inv'", "[2, 3]", "expected shape [4, 3]", "[64, 128]"});
  expect_bad(run("f16s"), bad, {"'f16s.weight_scale_inv'", "F16", "F32, BF16 or F8_E8M0"});
  expect_bad(run("bf16"), bad, {"'bf16.weight'", "BF16", "F8_E4M3", file});
  expect_bad(run("cube"), bad, {"'cube.weight'", "2-D"});
  expect_bad(run("ok", {0, 128}), bad, {"'ok.weight'", "[0, 128]"});
  expect_bad(run("ok", {}, 2, 0, 1), bad, {"'ok.weight'", "dim 0 or 1"});
  expect_bad(run("ok", {}, 0, 100, 201), bad, {"'ok.weight'", "[100, 201)"});
  expect_bad(run("ok", {}, 1, 10, 5), bad, {"'ok.weight'", "[10, 5)"});
  expect_bad(run("ok", {}, 1, -1, 5), bad, {"'ok.weight'"});
  EXPECT_EQ(reader.reads(), 0u);
  EXPECT_TRUE(run("ok").ok());
}

TEST(Fp8Test, ParseBlockQuant) {
  const auto parse = [](const char* text) { return parse_block_quant(json::parse(text)); };
  auto none = parse(R"({"model_type": "llama"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto null_q = parse(R"({"quantization_config": null})");
  ASSERT_TRUE(null_q.ok());
  EXPECT_FALSE(null_q->has_value());
  // DeepSeek-V3 and Kimi-K2 config.json.
  auto ds = parse(R"({"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                      "quant_method": "fp8", "weight_block_size": [128, 128]}})");
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_TRUE(ds->has_value());
  EXPECT_EQ((*ds)->block_rows, 128);
  EXPECT_EQ((*ds)->block_cols, 128);
  auto odd = parse_block_quant(json{{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {64, 32}}}}});
  ASSERT_TRUE(odd.ok()) << odd.status().message();
  EXPECT_EQ((*odd)->block_rows, 64);
  EXPECT_EQ((*odd)->block_cols, 32);

  const StatusCode unsupported = StatusCode::kUnsupported, bad = StatusCode::kInvalidArgument;
  expect_bad(parse(R"({"quantization_config": {"quant_method": "awq", "bits": 4}})").status(), unsupported,
             {"quant_method", "'awq'"});
  expect_bad(parse(R"({"quantization_config": {"quant_method": "fp8", "fmt": "int4",
                       "weight_block_size": [128, 128]}})").status(), unsupported, {"fmt", "int4"});
  expect_bad(parse(R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "static",
                       "weight_block_size": [128, 128]}})").status(), unsupported, {"activation_scheme", "static"});
  expect_bad(parse(R"({"quantization_config": {"quant_method": "fp8"}})").status(), unsupported,
             {"weight_block_size", "per-tensor"});
  expect_bad(parse(R"({"quantization_config": {"bits": 4}})").status(), bad, {"quant_method"});
  expect_bad(parse(R"({"quantization_config": "fp8"})").status(), bad, {"quantization_config", "not an object"});
  for (const char* size : {"[128]", "[0, 128]", "[128, -1]", "[128, 1.5]", "\"128\"", "[128, 128, 1]"}) {
    const std::string text =
        std::string(R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": )") + size + "}}";
    expect_bad(parse(text.c_str()).status(), bad, {"weight_block_size", json::parse(size).dump()});
  }
}

// The nearest E4M3 value by search over all finite codes, ties to the even code (mantissa
// LSB 0), saturating at +-448: the definition the bit-twiddling encoder must match.
uint8_t nearest_e4m3(float v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(v));
  uint8_t best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(f8_e4m3_to_f32(static_cast<uint8_t>(c)) - a);
    const double db = std::fabs(f8_e4m3_to_f32(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = static_cast<uint8_t>(c);
  }
  return sign | best;
}

TEST(Fp8Test, E4M3EncoderRoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    ASSERT_EQ(f32_to_f8_e4m3_sat(f8_e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
  // Midpoints between neighbouring codes (ties) and points a little either side of them.
  std::vector<float> probes = {0.0f, -0.0f, 448.0f, 463.9f, 464.0f, 464.1f, 500.0f, 1e9f, -1e9f, INFINITY,
                               -INFINITY, 1e-30f, std::ldexp(1.0f, -10), std::ldexp(3.0f, -11)};
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8_e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few mantissa bits
    for (float p : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), (lo + mid) / 2}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  for (float p : probes) EXPECT_EQ(f32_to_f8_e4m3_sat(p), nearest_e4m3(p)) << "value " << p;
  EXPECT_EQ(f32_to_f8_e4m3_sat(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8_e4m3_sat(464.0f), 0x7e);  // tie between 448 (even) and 480 (not E4M3FN)
  EXPECT_EQ(f32_to_f8_e4m3_sat(-1e9f), 0xfe);
}

// UE8M0 scales (DeepSeek-V4's `.scale`, F8_E8M0): each the power of two at or above amax / 448,
// so no value saturates; read back as F8_E8M0 bytes 127 + log2(scale), the checkpoint path gives
// the weight within E4M3's precision. The control: the same bytes with one scale byte one lower
// (half the scale) put that block's elements off by half.
TEST(Fp8Test, PowerOfTwoScalesAsUe8m0) {
  std::vector<float> w(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  auto [q, scale] = quantize_fp8_blocks(w.data(), kRows, kCols, {kBlock, kBlock, true});
  ASSERT_EQ(scale.size(), 6u);
  std::vector<uint8_t> e8m0(scale.size());
  for (size_t b = 0; b < scale.size(); ++b) {
    int e = 0;
    EXPECT_EQ(std::frexp(scale[b], &e), 0.5f) << "block " << b << ": " << scale[b] << " is not a power of two";
    EXPECT_GE(scale[b] * 448.0f, 3.0f * 0.999f) << "block " << b;  // no saturation: amax <= 448 s
    EXPECT_LT(scale[b] * 448.0f / 2, 3.0f) << "block " << b;         // and the smallest such power
    e8m0[b] = static_cast<uint8_t>(127 + e - 1);
  }
  const auto load = [&](const std::vector<uint8_t>& scales) {
    TempDir dir;
    SafetensorsWriter writer;
    writer.add("w.weight", DType::kF8_E4M3, {kRows, kCols}, q);
    writer.add("w.scale", DType::kF8_E8M0, {2, 3}, scales);
    const Catalog catalog = open_catalog(dir, writer);
    ByteReader reader;
    auto t = load_fp8_dequant_f32(catalog, "w.weight", "w.scale", {}, reader, nullptr);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::vector<float>(t->f32(), t->f32() + t->numel()) : std::vector<float>{};
  };
  const std::vector<float> dq = load(e8m0);
  ASSERT_EQ(dq.size(), w.size());
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(dq[i]) - w[i]) / 3.0);
  EXPECT_LT(worst, 1.0 / 16);  // 3 mantissa bits: half an ulp of the largest is 2^-4 of it
  std::vector<uint8_t> halved = e8m0;
  --halved[4];
  const std::vector<float> bad = load(halved);
  ASSERT_EQ(bad.size(), w.size());
  EXPECT_EQ(bad[kBlock * kCols + kBlock], dq[kBlock * kCols + kBlock] / 2);  // block [1][1], first element
}

TEST(Fp8Test, QuantizeThenDequantizeIsWithinE4M3Precision) {
  const uint32_t seed = 20250607;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kRows * kCols);  // [200, 300]: six blocks of 128x128, partial at the edges
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      const int64_t blk = (i / kBlock) * 3 + j / kBlock;
      const float magnitude = std::ldexp(1.0f, static_cast<int>(blk * 3) - 8);  // 2^-8 .. 2^4
      w[i * kCols + j] = blk == 5 ? 0.0f : normal(rng) * magnitude;            // block [1][2] all zero
    }
  auto [q, scale] = quantize_fp8_blocks(w.data(), kRows, kCols, {});
  ASSERT_EQ(q.size(), w.size());
  ASSERT_EQ(scale.size(), 6u);
  for (int blk = 0; blk < 6; ++blk) {
    float amax = 0.0f;
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kCols; ++j)
        if ((i / kBlock) * 3 + j / kBlock == blk) amax = std::max(amax, std::fabs(w[i * kCols + j]));
    EXPECT_EQ(scale[blk], blk == 5 ? 1.0f : amax / 448.0f) << "block " << blk;
  }

  // Write and load through the checkpoint path, as a test model would.
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("w.weight", DType::kF8_E4M3, {kRows, kCols}, q);
  writer.add("w.weight_scale_inv", DType::kF32, {2, 3}, bytes_of(scale));
  const Catalog catalog = open_catalog(dir, writer);
  ByteReader reader;
  auto t = load_fp8_dequant_f32(catalog, "w.weight", "w.weight_scale_inv", {}, reader, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const float* dq = t->f32();

  // Per element: E4M3 keeps 3 mantissa bits, so rounding w / s errs by at most 2^-4 of it (half
  // an ulp) among normals and by 2^-10 (half the 2^-9 step) among subnormals; scaled back by s.
  // 1e-6 |w| covers the f32 roundings of w / s and q * s.
  int shown = 0;
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < kRows && shown < 5; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      const float x = w[i * kCols + j], s = scale[(i / kBlock) * 3 + j / kBlock];
      const double tol = std::ldexp(std::fabs(x), -4) + std::ldexp(s, -10) + 1e-6 * std::fabs(x);
      const double err = std::fabs(static_cast<double>(dq[i * kCols + j]) - x);
      err2 += err * err;
      ref2 += static_cast<double>(x) * x;
      if (err > tol && shown++ < 5)
        ADD_FAILURE() << "seed " << seed << " [" << i << ", " << j << "]: " << x << " -> " << dq[i * kCols + j];
    }
  for (int64_t j = 256; j < kCols; ++j) EXPECT_EQ(dq[199 * kCols + j], 0.0f);
  // Every element is within 2^-4 relative (bar subnormals, far below the norm), so is the L2 norm.
  EXPECT_LT(std::sqrt(err2 / ref2), 0.0625) << "seed " << seed;
  // The block maximum maps to +-448 exactly.
  int64_t full_scale = 0;
  for (uint8_t b : q) full_scale += (b & 0x7f) == 0x7e;
  EXPECT_GE(full_scale, 5);
}

}  // namespace
}  // namespace dayzero::checkpoint
