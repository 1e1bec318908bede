// load_f32 / load_slice_f32: conversions from every float format, NaN/Inf counts, slices equal
// to the matching part of the full tensor, and records that show exactly which bytes were read.
#include "checkpoint/load.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint/writer.h"
#include "checkpoint/xxhash.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::bytes_of;
using test_util::expect_bad;
using test_util::TempDir;

constexpr int64_t kRows = 5, kCols = 7;

// A checkpoint with converted-value tensors and a [kRows, kCols] matrix m[r][c] = 100 r + c
// in F32 and BF16 (exact in both), plus a [3, 4, 2] tensor and a BOOL one.
class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SafetensorsWriter w;
    w.add("bf16", DType::kBF16, {5}, bytes_of(std::vector<uint16_t>{0x3f80, 0xc000, 0x3f00, 0x7f80, 0x7fc0}));
    w.add("f16", DType::kF16, {5}, bytes_of(std::vector<uint16_t>{0x3c00, 0xc000, 0x7bff, 0x7c00, 0x7e00}));
    w.add("f8_e4m3", DType::kF8_E4M3, {5}, {0x38, 0x7e, 0x7f, 0xb8, 0x01});
    w.add("f8_e5m2", DType::kF8_E5M2, {4}, {0x3c, 0x7b, 0x7c, 0xbc});
    w.add("i8", DType::kI8, {2}, {0xfd, 0x05});
    w.add("flag", DType::kBool, {2}, {0, 1});
    std::vector<float> m;
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kCols; ++c) m.push_back(static_cast<float>(100 * r + c));
    m_bf16_.resize(m.size() * 2);
    convert_from_f32(DType::kBF16, m.data(), m_bf16_.data(), m.size());
    w.add("m_f32", DType::kF32, {kRows, kCols}, bytes_of(m));
    w.add("m_bf16", DType::kBF16, {kRows, kCols}, m_bf16_);
    std::vector<float> cube(24);
    for (int i = 0; i < 24; ++i) cube[i] = static_cast<float>(i);
    w.add("cube", DType::kF32, {3, 4, 2}, bytes_of(cube));
    ASSERT_TRUE(w.write(dir_.file("model.safetensors")).ok());
    auto c = Catalog::open(dir_.path());
    ASSERT_TRUE(c.ok()) << c.status().message();
    catalog_ = std::move(c).value();
  }

  std::vector<float> load(const std::string& name, WeightRecord* rec = nullptr,
                          size_t staging = kDefaultStagingBytes) {
    auto t = load_f32(catalog_, name, reader_, rec, staging);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) return {};
    return std::vector<float>(t->f32(), t->f32() + t->numel());
  }

  TempDir dir_;
  Catalog catalog_;
  ByteReader reader_;
  std::vector<uint8_t> m_bf16_;
};

TEST_F(LoadTest, ConvertsBf16) {
  WeightRecord rec;
  const auto v = load("bf16", &rec);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 0.5f);
  EXPECT_TRUE(std::isinf(v[3]) && v[3] > 0);
  EXPECT_TRUE(std::isnan(v[4]));
  EXPECT_EQ(rec.nan_count, 1);
  EXPECT_EQ(rec.inf_count, 1);
  EXPECT_EQ(rec.dtype, DType::kBF16);
  EXPECT_EQ(rec.shape, Shape{5});
  EXPECT_EQ(rec.bytes_read, 10u);
  ASSERT_EQ(rec.ranges.size(), 1u);
  EXPECT_EQ(rec.ranges[0], std::make_pair(catalog_.find("bf16")->offset, uint64_t{10}));
  const uint16_t raw[] = {0x3f80, 0xc000, 0x3f00, 0x7f80, 0x7fc0};
  EXPECT_EQ(rec.checksum, xxh64(raw, sizeof raw));
}

TEST_F(LoadTest, ConvertsF16) {
  const auto v = load("f16");
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_TRUE(std::isnan(v[4]));
}

TEST_F(LoadTest, ConvertsF8) {
  WeightRecord rec;
  const auto a = load("f8_e4m3", &rec);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[1], 448.0f);
  EXPECT_TRUE(std::isnan(a[2]));
  EXPECT_EQ(a[3], -1.0f);
  EXPECT_EQ(a[4], std::ldexp(1.0f, -9));
  EXPECT_EQ(rec.nan_count, 1);
  EXPECT_EQ(rec.inf_count, 0);
  const auto b = load("f8_e5m2");
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 57344.0f);
  EXPECT_TRUE(std::isinf(b[2]));
  EXPECT_EQ(b[3], -1.0f);
  EXPECT_EQ(load("i8"), (std::vector<float>{-3.0f, 5.0f}));
}

TEST_F(LoadTest, SmallStagingBufferGivesSameResult) {
  WeightRecord whole, chunked;
  const auto a = load("m_bf16", &whole);
  const uint64_t reads_before = reader_.reads();
  const auto b = load("m_bf16", &chunked, 12);  // two staging buffers of 3 elements: 3 per read
  EXPECT_EQ(a, b);
  EXPECT_EQ(whole.checksum, chunked.checksum);
  EXPECT_EQ(chunked.reads, (kRows * kCols + 2) / 3u);
  EXPECT_EQ(reader_.reads() - reads_before, chunked.reads);
  EXPECT_EQ(whole.reads, 1u);
  EXPECT_EQ(whole.checksum, xxh64(m_bf16_.data(), m_bf16_.size()));
}

TEST_F(LoadTest, SliceDim0MatchesFullAndReadsOnlyOwnedBytes) {
  for (const std::string name : {"m_f32", "m_bf16"}) {
    const auto full = load(name);
    const TensorInfo* info = catalog_.find(name);
    const uint64_t row_bytes = info->nbytes / kRows;
    WeightRecord rec;
    auto s = load_slice_f32(catalog_, name, 0, 1, 4, reader_, &rec);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->shape(), (Shape{3, kCols}));
    for (int64_t i = 0; i < 3 * kCols; ++i) ASSERT_EQ(s->f32()[i], full[kCols + i]) << name << " " << i;
    EXPECT_EQ(rec.shape, (Shape{3, kCols}));
    EXPECT_EQ(rec.bytes_read, 3 * row_bytes);
    ASSERT_EQ(rec.ranges.size(), 1u);
    EXPECT_EQ(rec.ranges[0], std::make_pair(info->offset + row_bytes, 3 * row_bytes));
    EXPECT_EQ(rec.reads, 1u);
    if (name == "m_bf16") {
      EXPECT_EQ(rec.checksum, xxh64(m_bf16_.data() + row_bytes, 3 * row_bytes));
    }
  }
}

// A sectioned split's rows (plan/slicing.h): rows 0 and 2-4 of m, concatenated, one record with
// a byte range per run of rows and the checksum of exactly those bytes in order.
TEST_F(LoadTest, ResultsPlacedInAnArenaAreTheSame) {
  HostArena arena(2 * HostArena::padded(kRows * kCols * 4));
  Loader loader(2, 64);  // small chunks: several per tensor, two threads
  loader.place_results_in(&arena);
  WeightRecord rec_arena, rec_own;
  auto a = loader.load(catalog_, "m_bf16", reader_, &rec_arena);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = loader.load_slice(catalog_, "m_f32", 0, 1, 3, reader_, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().message();
  const auto* base = static_cast<const char*>(a->data());
  EXPECT_EQ(static_cast<const char*>(b->data()), base + HostArena::padded(kRows * kCols * 4));
  loader.place_results_in(nullptr);
  auto own = loader.load(catalog_, "m_bf16", reader_, &rec_own);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(std::memcmp(a->data(), own->data(), own->bytes()), 0);
  EXPECT_EQ(rec_arena.checksum, rec_own.checksum);
  const auto full = load("m_f32");
  for (int64_t i = 0; i < 2 * kCols; ++i) ASSERT_EQ(b->f32()[i], full[kCols + i]);
}

TEST_F(LoadTest, RowRangesConcatenateInOrder) {
  for (const std::string name : {"m_f32", "m_bf16"}) {
    const auto full = load(name);
    const TensorInfo* info = catalog_.find(name);
    const uint64_t row_bytes = info->nbytes / kRows;
    Loader loader;
    WeightRecord rec;
    ASSERT_TRUE(loader.submit_rows(catalog_, name, reader_, {{0, 1}, {2, 4}, {4, 5}}).ok());
    auto s = loader.next(&rec);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->shape(), (Shape{4, kCols}));
    const int64_t rows[] = {0, 2, 3, 4};
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t c = 0; c < kCols; ++c) ASSERT_EQ(s->f32()[i * kCols + c], full[rows[i] * kCols + c]) << name;
    EXPECT_EQ(rec.shape, (Shape{4, kCols}));
    EXPECT_EQ(rec.bytes_read, 4 * row_bytes);
    ASSERT_EQ(rec.ranges.size(), 2u);  // rows 2-3 and 4 coalesce
    EXPECT_EQ(rec.ranges[0], std::make_pair(info->offset, row_bytes));
    EXPECT_EQ(rec.ranges[1], std::make_pair(info->offset + 2 * row_bytes, 3 * row_bytes));
    if (name == "m_bf16") {
      std::vector<uint8_t> read(m_bf16_.begin(), m_bf16_.begin() + static_cast<int64_t>(row_bytes));
      read.insert(read.end(), m_bf16_.begin() + static_cast<int64_t>(2 * row_bytes), m_bf16_.end());
      EXPECT_EQ(rec.checksum, xxh64(read.data(), read.size()));
    }
  }
  Loader loader;
  expect_bad(loader.submit_rows(catalog_, "m_f32", reader_, {{0, 1}, {4, 6}}), StatusCode::kInvalidArgument,
             {"'m_f32'", "[4, 6)"});
  EXPECT_EQ(loader.pending(), 0u);
}

TEST_F(LoadTest, SliceDim1MatchesFullOneReadPerRow) {
  for (const std::string name : {"m_f32", "m_bf16"}) {
    const auto full = load(name);
    const uint64_t esize = dtype_size(catalog_.find(name)->dtype);
    WeightRecord rec;
    auto s = load_slice_f32(catalog_, name, 1, 2, 5, reader_, &rec);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->shape(), (Shape{kRows, 3}));
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(s->f32()[r * 3 + c], full[r * kCols + 2 + c]) << name;
    EXPECT_EQ(rec.ranges.size(), static_cast<size_t>(kRows));
    EXPECT_EQ(rec.reads, static_cast<uint64_t>(kRows));
    EXPECT_EQ(rec.bytes_read, kRows * 3 * esize);
  }
  std::vector<uint8_t> expect;  // the bytes read, in order
  for (int64_t r = 0; r < kRows; ++r)
    expect.insert(expect.end(), m_bf16_.begin() + (r * kCols + 2) * 2, m_bf16_.begin() + (r * kCols + 5) * 2);
  WeightRecord rec;
  ASSERT_TRUE(load_slice_f32(catalog_, "m_bf16", 1, 2, 5, reader_, &rec).ok());
  EXPECT_EQ(rec.checksum, xxh64(expect.data(), expect.size()));
}

TEST_F(LoadTest, FullWidthColumnSliceCoalescesToOneRange) {
  WeightRecord rec;
  auto s = load_slice_f32(catalog_, "m_f32", 1, 0, kCols, reader_, &rec);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(rec.ranges.size(), 1u);
  EXPECT_EQ(rec.bytes_read, catalog_.find("m_f32")->nbytes);
  EXPECT_EQ(std::vector<float>(s->f32(), s->f32() + s->numel()), load("m_f32"));
}

TEST_F(LoadTest, SliceDim0Of3d) {
  auto s = load_slice_f32(catalog_, "cube", 0, 2, 3, reader_, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape(), (Shape{1, 4, 2}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s->f32()[i], 16.0f + i);
  auto empty = load_slice_f32(catalog_, "cube", 0, 1, 1, reader_, nullptr);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
}

TEST_F(LoadTest, NonNumericDtypeRejected) {
  expect_bad(load_f32(catalog_, "flag", reader_, nullptr).status(), StatusCode::kUnsupported,
             {"'flag'", "BOOL"});
}

TEST_F(LoadTest, MissingTensor) {
  expect_bad(load_f32(catalog_, "nope", reader_, nullptr).status(), StatusCode::kNotFound,
             {"'nope'", dir_.path()});
}

TEST_F(LoadTest, BadSliceRanges) {
  const StatusCode bad = StatusCode::kInvalidArgument;
  expect_bad(load_slice_f32(catalog_, "m_f32", 0, 3, 6, reader_, nullptr).status(), bad,
             {"'m_f32'", "[3, 6)"});
  expect_bad(load_slice_f32(catalog_, "m_f32", 1, 4, 2, reader_, nullptr).status(), bad, {"'m_f32'"});
  expect_bad(load_slice_f32(catalog_, "m_f32", 1, -1, 2, reader_, nullptr).status(), bad, {"'m_f32'"});
  expect_bad(load_slice_f32(catalog_, "m_f32", 2, 0, 1, reader_, nullptr).status(), bad, {"'m_f32'"});
  expect_bad(load_slice_f32(catalog_, "cube", 1, 0, 1, reader_, nullptr).status(), bad, {"'cube'", "2-D"});
}

TEST_F(LoadTest, FileShrunkAfterCatalogIsCorrupt) {
  std::filesystem::resize_file(dir_.file("model.safetensors"), catalog_.find("m_f32")->offset + 8);
  ByteReader fresh;
  expect_bad(load_f32(catalog_, "m_f32", fresh, nullptr).status(), StatusCode::kCorrupt,
             {"'m_f32'", "model.safetensors"});
}


// The threaded pipeline (Loader with helper threads) against the inline one: bit-identical
// values and identical records for every dtype, whole tensors and both slice kinds, with
// staging small enough that a tensor is many chunks and the staging ring wraps many times.
class LoaderThreadsTest : public ::testing::Test {
 protected:
  static constexpr int64_t kR = 61, kC = 37;
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(test_util::write_four_dtype_matrix(dir_, kR, kC, catalog_)); }

  TempDir dir_;
  Catalog catalog_;
};

void expect_same(const Result<Tensor>& a, const WeightRecord& ra, const Result<Tensor>& b, const WeightRecord& rb,
                 const std::string& what) {
  ASSERT_TRUE(a.ok()) << what << ": " << a.status().message();
  ASSERT_TRUE(b.ok()) << what << ": " << b.status().message();
  ASSERT_EQ(a->shape(), b->shape()) << what;
  EXPECT_EQ(std::memcmp(a->data(), b->data(), a->bytes()), 0) << what;
  EXPECT_EQ(ra.checksum, rb.checksum) << what;
  EXPECT_EQ(ra.nan_count, rb.nan_count) << what;
  EXPECT_EQ(ra.inf_count, rb.inf_count) << what;
  EXPECT_EQ(ra.reads, rb.reads) << what;
  EXPECT_EQ(ra.bytes_read, rb.bytes_read) << what;
  EXPECT_EQ(ra.ranges, rb.ranges) << what;
}

TEST_F(LoaderThreadsTest, SameValuesAndRecordsAsInline) {
  for (const std::string name : {"f32", "BF16", "F16", "f8"}) {
    for (size_t staging : {size_t{64}, size_t{1000}, kDefaultStagingBytes}) {
      for (int threads : {2, 3}) {
        Loader loader(threads, staging);
        const std::string what = name + ", staging " + std::to_string(staging) + ", threads " + std::to_string(threads);
        ByteReader r1, r2;
        WeightRecord a, b;
        // Twice through the same loader: its staging ring and helpers are reused.
        for (int rep = 0; rep < 2; ++rep) {
          expect_same(load_f32(catalog_, name, r1, &a, staging), a, loader.load(catalog_, name, r2, &b), b, what);
          expect_same(load_slice_f32(catalog_, name, 0, 7, 50, r1, &a, staging), a,
                      loader.load_slice(catalog_, name, 0, 7, 50, r2, &b), b, what + ", rows");
          expect_same(load_slice_f32(catalog_, name, 1, 3, 20, r1, &a, staging), a,
                      loader.load_slice(catalog_, name, 1, 3, 20, r2, &b), b, what + ", columns");
        }
      }
    }
  }
  WeightRecord rec;
  Loader loader(2, 64);
  ByteReader reader;
  ASSERT_TRUE(loader.load(catalog_, "BF16", reader, &rec).ok());
  EXPECT_EQ(rec.nan_count, 2);
  EXPECT_EQ(rec.inf_count, 2);
  EXPECT_EQ(rec.reads, (kR * kC * 2 + 31) / 32u);  // chunks of half the staging
}

TEST_F(LoaderThreadsTest, QueuedTensorsComeBackInOrder) {
  const std::vector<std::string> names = {"f32", "BF16", "F16", "f8", "BF16", "f32"};
  for (int threads : {1, 2, 3}) {
    Loader loader(threads, 200);
    ByteReader r1, r2;
    for (const auto& name : names) ASSERT_TRUE(loader.submit(catalog_, name, r2, 1, 2, 30).ok()) << name;
    EXPECT_EQ(loader.pending(), names.size());
    for (const auto& name : names) {
      WeightRecord a, b;
      auto inline_load = load_slice_f32(catalog_, name, 1, 2, 30, r1, &a, 200);
      expect_same(inline_load, a, loader.next(&b), b, name + ", threads " + std::to_string(threads));
      EXPECT_EQ(b.name, name);
    }
    EXPECT_EQ(loader.pending(), 0u);
  }
}

TEST_F(LoaderThreadsTest, ReadErrorMidTensorStopsHelpers) {
  const TensorInfo* first = &catalog_.tensors().front();
  const TensorInfo* last = first;
  for (const auto& t : catalog_.tensors()) {
    if (t.offset < first->offset) first = &t;
    if (t.offset > last->offset) last = &t;
  }
  std::filesystem::resize_file(dir_.file("model.safetensors"), last->offset + last->nbytes / 2);
  for (int threads : {1, 2, 3}) {
    Loader loader(threads, 64);
    ByteReader reader;
    expect_bad(loader.load(catalog_, last->name, reader, nullptr).status(), StatusCode::kCorrupt,
               {"'" + last->name + "'", "model.safetensors"});
    ASSERT_TRUE(loader.load(catalog_, first->name, reader, nullptr).ok());  // the loader is still usable
  }
}

}  // namespace
}  // namespace dayzero::checkpoint
