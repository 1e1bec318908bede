// runtime::load_weights for a backend that wants_stored_dtype(), on the CPU: a stand-in device
// that takes BF16/F16 host tensors as stored and widens them itself (as the CUDA backend does on
// its device) ends up with the same weights, bit for bit, and the same records as the CPU
// backend's f32 hand-over, for tiny BF16 and F16 llamas, whole and split over tp 2; every 2-byte
// tensor reaches it as stored, so half the f32 bytes cross (backend::WeightStaging). The CPU
// backend itself still gets f32 (wants_stored_dtype false).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "backend/weight_staging.h"
#include "model/registry.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"
#include "tools/make_model.h"

namespace dayzero {
namespace {
namespace fs = std::filesystem;

// Forwards to the CPU backend; takes weights as stored and widens them on "its device".
class StoredDevice final : public backend::Backend {
 public:
  StoredDevice() : cpu_(std::move(backend::make_backend({})).value()) {}
  std::string name() const override { return "stored"; }
  std::string describe() const override { return "stored"; }
  Device device() const override { return {}; }
  bool wants_stored_dtype() const override { return true; }
  Tensor empty(DType d, Shape s) override { return cpu_->empty(d, std::move(s)); }
  Tensor to_device(const Tensor& h) override { return cpu_->to_device(h); }
  Tensor to_device_weight(const Tensor& h) override { return to_device_weight(h, DType::kF32); }
  Tensor to_device_weight(const Tensor& h, DType kept) override {
    (void)kept;
    const backend::WeightStaging s{h.dtype(), DType::kF32, size_t{32} << 20};
    crossed_ += s.transfer_bytes(h.numel());
    f32_bytes_ += h.numel() * 4;
    if (h.dtype() != DType::kF32) ++as_stored_;
    if (!s.converts()) return h;
    Tensor wide = Tensor::host(DType::kF32, h.shape());
    convert_to_f32(h.dtype(), static_cast<const uint8_t*>(h.data()), wide.f32(), static_cast<size_t>(h.numel()));
    return wide;
  }
  void to_host(const Tensor& s, Tensor& d) override { cpu_->to_host(s, d); }
  void copy(const Tensor& s, Tensor& d) override { cpu_->copy(s, d); }
  void synchronize() override {}
  backend::MemoryInfo memory_info() const override { return cpu_->memory_info(); }
  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool acc) override { cpu_->matmul(x, w, y, acc); }
  void add_bias(const Tensor& b, Tensor& y) override { cpu_->add_bias(b, y); }
  void add(const Tensor& x, Tensor& y) override { cpu_->add(x, y); }
  void rmsnorm(const Tensor& x, const Tensor& w, float e, Tensor& y) override { cpu_->rmsnorm(x, w, e, y); }
  void rope(Tensor& x, const Tensor& p, const Tensor& f) override { cpu_->rope(x, p, f); }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t p, float s, Tensor& o) override {
    cpu_->attention(q, k, v, p, s, o);
  }
  void swiglu(const Tensor& g, const Tensor& u, Tensor& o) override { cpu_->swiglu(g, u, o); }
  void embedding(const Tensor& i, const Tensor& t, int64_t r, Tensor& o) override { cpu_->embedding(i, t, r, o); }
  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float e, Tensor& y) override {
    cpu_->layernorm(x, w, b, e, y);
  }
  void gelu(backend::GeluKind k, const Tensor& x, Tensor& y) override { cpu_->gelu(k, x, y); }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float s, Tensor& o) override {
    cpu_->attention_full(q, k, v, s, o);
  }
  void route_topk(const Tensor& l, const Tensor* b, const backend::RouterOptions& o, Tensor& i, Tensor& w) override {
    cpu_->route_topk(l, b, o, i, w);
  }

  uint64_t crossed_ = 0, f32_bytes_ = 0;
  int as_stored_ = 0;

 private:
  std::unique_ptr<backend::Backend> cpu_;
};

class StoredDtypeLoadCpu : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& d : dirs_) fs::remove_all(d);
  }
  runtime::ModelInfo make(DType dtype) {
    const fs::path dir = fs::temp_directory_path() /
                         ("dayzero-sdl-" + std::to_string(getpid()) + "-" + std::to_string(dirs_.size()));
    dirs_.push_back(dir);
    tools::MakeModelOptions o;
    o.family = "llama";
    o.out_dir = dir.string();
    o.dtype = dtype;
    o.seed = 9;
    EXPECT_TRUE(tools::make_model(o).ok());
    auto info = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
    EXPECT_TRUE(info.ok()) << info.status().message();
    return std::move(info).value();
  }
  std::vector<fs::path> dirs_;
};

TEST_F(StoredDtypeLoadCpu, SameWeightsAndRecordsAsTheF32HandOver) {
  for (DType stored : {DType::kBF16, DType::kF16}) {
    const runtime::ModelInfo m = make(stored);
    // A column and a row split (tp 2, rank 1 of 2): the second half of every split dim.
    for (bool split : {false, true}) {
      const runtime::SliceFn slice_of = [&](const model::TensorSpec& spec) -> runtime::TensorSlice {
        if (!split || spec.shape.size() != 2) return {};
        const int dim = spec.name.find("o_proj") != std::string::npos || spec.name.find("down_proj") != std::string::npos
                            ? 1
                            : 0;
        return {true, dim, spec.shape[dim] / 2, spec.shape[dim]};
      };
      const std::string what = std::string(dtype_name(stored)) + (split ? ", split" : ", whole");
      auto cpu = backend::make_backend({});
      ASSERT_TRUE(cpu.ok());
      ASSERT_FALSE((*cpu)->wants_stored_dtype());
      for (plan::WeightsOnDevice w : {plan::WeightsOnDevice::kAsStored, plan::WeightsOnDevice::kF32}) {
        StoredDevice dev;
        model::Weights a, b;
        std::vector<checkpoint::WeightRecord> ra, rb;
        ASSERT_TRUE(runtime::load_weights(m, **cpu, a, ra, {}, slice_of, checkpoint::kDefaultStagingBytes, 2, w).ok());
        ASSERT_TRUE(runtime::load_weights(m, dev, b, rb, {}, slice_of, checkpoint::kDefaultStagingBytes, 2, w).ok());
        ASSERT_EQ(ra.size(), rb.size()) << what;
        for (size_t i = 0; i < ra.size(); ++i) {
          EXPECT_EQ(ra[i].name, rb[i].name) << what;
          EXPECT_EQ(ra[i].checksum, rb[i].checksum) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].ranges, rb[i].ranges) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].reads, rb[i].reads) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].shape, rb[i].shape) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].nan_count + ra[i].inf_count, rb[i].nan_count + rb[i].inf_count) << what;
        }
        int compared = 0;
        for (const auto& spec : m.specs) {
          const Tensor* ta = a.find(spec.name);
          const Tensor* tb = b.find(spec.name);
          ASSERT_EQ(ta == nullptr, tb == nullptr) << what << ": " << spec.name;
          if (!ta) continue;
          ASSERT_EQ(ta->dtype(), DType::kF32);
          ASSERT_EQ(tb->dtype(), DType::kF32);
          ASSERT_EQ(ta->shape(), tb->shape()) << what << ": " << spec.name;
          EXPECT_EQ(std::memcmp(ta->data(), tb->data(), ta->bytes()), 0) << what << ": " << spec.name;
          ++compared;
        }
        EXPECT_GT(compared, 5) << what;
        EXPECT_EQ(dev.as_stored_, compared) << what << ": every tensor reached the device as stored";
        EXPECT_EQ(dev.crossed_ * 2, dev.f32_bytes_) << what << ": half the f32 bytes cross";
      }
    }
  }
}

// The staging arithmetic the CUDA backend's to_device_weight follows.
TEST(WeightStaging, ChunksAndBytes) {
  const backend::WeightStaging bf16{DType::kBF16, DType::kBF16, 32 << 20}, f16{DType::kF16, DType::kBF16, 32 << 20},
      f32{DType::kF32, DType::kBF16, 32 << 20}, tiny{DType::kF32, DType::kF32, 3};
  EXPECT_FALSE(bf16.converts());
  EXPECT_TRUE(f16.converts());
  EXPECT_TRUE(f32.converts());
  EXPECT_FALSE(tiny.converts());
  EXPECT_EQ(bf16.chunk_elems(), size_t{16} << 20);
  EXPECT_EQ(f32.chunk_elems(), size_t{8} << 20);
  EXPECT_EQ(tiny.chunk_elems(), 1u);  // at least one element per chunk
  EXPECT_EQ(bf16.transfer_bytes(1000), 2000u);
  EXPECT_EQ(f32.transfer_bytes(1000), 4000u);
  EXPECT_EQ(f16.kept_size(), 2u);
}

}  // namespace
}  // namespace dayzero
