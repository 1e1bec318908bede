// BatchSink: each sequence's sink gets exactly its rows of a batch tensor (all rows of the
// batch, or one row per sequence), and only the names it wants.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "runtime/batch_sink.h"

namespace dayzero {
namespace {

// Records every put as host values.
class Recorder final : public model::ActivationSink {
 public:
  explicit Recorder(std::set<std::string> wanted) : wanted_(std::move(wanted)) {}
  bool wants(const std::string& name) const override { return wanted_.count(name) > 0; }
  void put(const std::string& name, const Tensor& t) override {
    const float* p = t.f32();
    got[name].push_back(std::vector<float>(p, p + t.numel()));
  }
  std::map<std::string, std::vector<std::vector<float>>> got;

 private:
  std::set<std::string> wanted_;
};

Tensor rows_of(int64_t rows, int64_t width) {  // element (r, c) = 10 r + c
  Tensor t = Tensor::host(DType::kF32, {rows, width});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) t.f32()[r * width + c] = static_cast<float>(10 * r + c);
  return t;
}

TEST(BatchSink, SplitsRowsBySequence) {
  Recorder a({"embed", "logits"}), b({"logits"});
  // Sequence 0: rows 0-1 (two tokens), sequence 1: row 2 (no sink), sequence 2: row 3.
  runtime::BatchSink sink({{0, 2, &a}, {2, 1, nullptr}, {3, 1, &b}});
  EXPECT_TRUE(sink.any());
  EXPECT_TRUE(sink.wants("embed"));
  EXPECT_TRUE(sink.wants("logits"));
  EXPECT_FALSE(sink.wants("final_norm"));

  sink.put("embed", rows_of(4, 2));  // every row of the batch
  ASSERT_EQ(a.got["embed"].size(), 1u);
  EXPECT_EQ(a.got["embed"][0], (std::vector<float>{0, 1, 10, 11}));
  EXPECT_EQ(b.got.count("embed"), 0u) << "b does not want embed";

  sink.put("logits", rows_of(3, 2));  // one row per sequence
  ASSERT_EQ(a.got["logits"].size(), 1u);
  EXPECT_EQ(a.got["logits"][0], (std::vector<float>{0, 1}));
  ASSERT_EQ(b.got["logits"].size(), 1u);
  EXPECT_EQ(b.got["logits"][0], (std::vector<float>{20, 21}));
}

TEST(BatchSink, NoSinksWantsNothing) {
  runtime::BatchSink sink({{0, 1, nullptr}, {1, 1, nullptr}});
  EXPECT_FALSE(sink.any());
  EXPECT_FALSE(sink.wants("embed"));
}

}  // namespace
}  // namespace dayzero
