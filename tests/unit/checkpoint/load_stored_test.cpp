// Loader::set_keep_stored_float: BF16 and F16 tensors handed over as stored (the file's bytes of
// the slice, in the file's dtype) with the same record as the F32 mode (checksum, NaN/Inf
// counts, ranges, reads), for whole tensors, both slice kinds and sectioned rows, any thread
// count and staging size; F32 and FP8 tensors still come as F32; the F32 mode unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "checkpoint/load.h"
#include "test_util.h"

namespace dayzero::checkpoint {
namespace {

using test_util::TempDir;

class LoadStoredTest : public ::testing::Test {
 protected:
  static constexpr int64_t kR = 61, kC = 37;
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(test_util::write_four_dtype_matrix(dir_, kR, kC, catalog_, &stored_));
  }

  // The file's bytes of rows [r0, r1) x columns [c0, c1) of a 2-byte tensor.
  std::vector<uint8_t> file_bytes(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const auto& b = stored_.at(name);
    std::vector<uint8_t> out;
    for (int64_t r = r0; r < r1; ++r)
      out.insert(out.end(), b.begin() + (r * kC + c0) * 2, b.begin() + (r * kC + c1) * 2);
    return out;
  }

  TempDir dir_;
  Catalog catalog_;
  std::map<std::string, std::vector<uint8_t>> stored_;
};

void expect_same_record(const WeightRecord& a, const WeightRecord& b, const std::string& what) {
  EXPECT_EQ(a.name, b.name) << what;
  EXPECT_EQ(a.file, b.file) << what;
  EXPECT_EQ(a.dtype, b.dtype) << what;
  EXPECT_EQ(a.shape, b.shape) << what;
  EXPECT_EQ(a.ranges, b.ranges) << what;
  EXPECT_EQ(a.bytes_read, b.bytes_read) << what;
  EXPECT_EQ(a.checksum, b.checksum) << what;
  EXPECT_EQ(a.nan_count, b.nan_count) << what;
  EXPECT_EQ(a.inf_count, b.inf_count) << what;
  EXPECT_EQ(a.reads, b.reads) << what;
  EXPECT_EQ(a.aux_bytes_read, b.aux_bytes_read) << what;
}

// What one load in both modes must show. rows: [r0, r1) x [c0, c1) of the whole tensor that the
// slice holds (sectioned rows: r0..r1 is one section, the test passes them one by one).
struct Slice {
  std::string kind;
  int dim;
  int64_t begin, end;
};

TEST_F(LoadStoredTest, StoredBytesAndTheSameRecordAsF32) {
  const std::vector<Slice> slices = {{"whole", -1, 0, 0}, {"rows", 0, 7, 50}, {"columns", 1, 3, 20}};
  int64_t non_finite_seen = 0;
  for (const std::string name : {"BF16", "F16", "f32", "f8"}) {
    const bool kept = name == "BF16" || name == "F16";
    for (size_t staging : {size_t{64}, size_t{1000}, kDefaultStagingBytes})
      for (int threads : {1, 3}) {
        Loader as_f32(threads, staging), as_stored(threads, staging);
        as_stored.set_keep_stored_float(true);
        ByteReader r1, r2;
        for (const Slice& s : slices) {
          const std::string what = name + " " + s.kind + ", staging " + std::to_string(staging) + ", threads " +
                                   std::to_string(threads);
          WeightRecord ra, rb;
          auto a = s.dim < 0 ? as_f32.load(catalog_, name, r1, &ra)
                             : as_f32.load_slice(catalog_, name, s.dim, s.begin, s.end, r1, &ra);
          auto b = s.dim < 0 ? as_stored.load(catalog_, name, r2, &rb)
                             : as_stored.load_slice(catalog_, name, s.dim, s.begin, s.end, r2, &rb);
          ASSERT_TRUE(a.ok() && b.ok()) << what;
          expect_same_record(ra, rb, what);
          non_finite_seen += rb.nan_count + rb.inf_count;
          ASSERT_EQ(a->dtype(), DType::kF32) << what;
          ASSERT_EQ(a->shape(), b->shape()) << what;
          if (!kept) {
            ASSERT_EQ(b->dtype(), DType::kF32) << what;
            EXPECT_EQ(std::memcmp(a->data(), b->data(), a->bytes()), 0) << what;
            continue;
          }
          ASSERT_EQ(dtype_name(b->dtype()), name) << what;
          const int64_t r0 = s.dim == 0 ? s.begin : 0, r1_ = s.dim == 0 ? s.end : kR;
          const int64_t c0 = s.dim == 1 ? s.begin : 0, c1 = s.dim == 1 ? s.end : kC;
          const auto want = file_bytes(name, r0, r1_, c0, c1);
          ASSERT_EQ(b->bytes(), want.size()) << what;
          EXPECT_EQ(std::memcmp(b->data(), want.data(), want.size()), 0) << what;
          // Widened, the stored values are the F32 mode's, bit for bit.
          std::vector<float> wide(static_cast<size_t>(b->numel()));
          convert_to_f32(b->dtype(), static_cast<const uint8_t*>(b->data()), wide.data(), wide.size());
          EXPECT_EQ(std::memcmp(wide.data(), a->data(), a->bytes()), 0) << what;
        }
        // Sectioned rows (a fused weight split over tp): one record over both sections.
        const std::vector<std::pair<int64_t, int64_t>> sections = {{2, 9}, {40, 45}};
        ASSERT_TRUE(as_f32.submit_rows(catalog_, name, r1, sections).ok());
        ASSERT_TRUE(as_stored.submit_rows(catalog_, name, r2, sections).ok());
        WeightRecord ra, rb;
        auto a = as_f32.next(&ra), b = as_stored.next(&rb);
        ASSERT_TRUE(a.ok() && b.ok()) << name;
        expect_same_record(ra, rb, name + " sections");
        if (kept) {
          auto want = file_bytes(name, 2, 9, 0, kC);
          const auto second = file_bytes(name, 40, 45, 0, kC);
          want.insert(want.end(), second.begin(), second.end());
          ASSERT_EQ(b->bytes(), want.size()) << name;
          EXPECT_EQ(std::memcmp(b->data(), want.data(), want.size()), 0) << name << " sections";
        }
      }
  }
  // The cases hold non-finite values (the counts compared above are not all zero).
  EXPECT_GT(non_finite_seen, 0);
}

// The mode applies to tensors submitted after the call; turned off, F32 again.
TEST_F(LoadStoredTest, TheModeAppliesFromTheNextTensor) {
  Loader loader(2, 64);
  ByteReader reader;
  ASSERT_TRUE(loader.submit(catalog_, "BF16", reader).ok());
  loader.set_keep_stored_float(true);
  ASSERT_TRUE(loader.submit(catalog_, "BF16", reader).ok());
  auto a = loader.next(nullptr), b = loader.next(nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->dtype(), DType::kF32);
  EXPECT_EQ(b->dtype(), DType::kBF16);
  EXPECT_EQ(b->bytes() * 2, a->bytes());
  loader.set_keep_stored_float(false);
  auto c = loader.load(catalog_, "F16", reader, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dtype(), DType::kF32);
}

}  // namespace
}  // namespace dayzero::checkpoint
