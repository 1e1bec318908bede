// gpu: weights crossing PCIe in their stored dtype (BF16/F16 host tensors, converted on the
// device) against the same model loaded with every tensor crossing as host f32: every weight
// on the device bit for bit the same (dtype, shape, bytes) and the records the same, for tiny
// BF16 and F16 llamas under each model.weights_on_device and both compute dtypes. Negative
// control: a weight off by one ulp in one element is seen by the byte comparison. Skips where
// no GPU is visible.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "checkpoint/load.h"
#include "model/registry.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"
#include "tools/make_model.h"

namespace dayzero {
namespace {
namespace fs = std::filesystem;

// The CUDA backend with the loader's f32 hand-over (wants_stored_dtype false): what every load
// did before. Forwards everything else.
class F32Crossing final : public backend::Backend {
 public:
  explicit F32Crossing(backend::Backend& be) : be_(be) {}
  std::string name() const override { return be_.name(); }
  std::string describe() const override { return be_.describe(); }
  Device device() const override { return be_.device(); }
  Tensor empty(DType d, Shape s) override { return be_.empty(d, std::move(s)); }
  Tensor to_device(const Tensor& h) override { return be_.to_device(h); }
  Tensor to_device_weight(const Tensor& h) override {
    EXPECT_EQ(h.dtype(), DType::kF32);
    return be_.to_device_weight(h);
  }
  Tensor to_device_weight(const Tensor& h, DType kept) override {
    EXPECT_EQ(h.dtype(), DType::kF32);
    return be_.to_device_weight(h, kept);
  }
  bool wants_stored_dtype() const override { return false; }
  void to_host(const Tensor& s, Tensor& d) override { be_.to_host(s, d); }
  void copy(const Tensor& s, Tensor& d) override { be_.copy(s, d); }
  void synchronize() override { be_.synchronize(); }
  backend::MemoryInfo memory_info() const override { return be_.memory_info(); }
  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool acc) override { be_.matmul(x, w, y, acc); }
  void add_bias(const Tensor& b, Tensor& y) override { be_.add_bias(b, y); }
  void add(const Tensor& x, Tensor& y) override { be_.add(x, y); }
  void rmsnorm(const Tensor& x, const Tensor& w, float e, Tensor& y) override { be_.rmsnorm(x, w, e, y); }
  void rope(Tensor& x, const Tensor& p, const Tensor& f) override { be_.rope(x, p, f); }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t p, float s, Tensor& o) override {
    be_.attention(q, k, v, p, s, o);
  }
  void swiglu(const Tensor& g, const Tensor& u, Tensor& o) override { be_.swiglu(g, u, o); }
  void embedding(const Tensor& i, const Tensor& t, int64_t r, Tensor& o) override { be_.embedding(i, t, r, o); }
  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float e, Tensor& y) override {
    be_.layernorm(x, w, b, e, y);
  }
  void gelu(backend::GeluKind k, const Tensor& x, Tensor& y) override { be_.gelu(k, x, y); }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float s, Tensor& o) override {
    be_.attention_full(q, k, v, s, o);
  }
  void route_topk(const Tensor& l, const Tensor* b, const backend::RouterOptions& o, Tensor& i, Tensor& w) override {
    be_.route_topk(l, b, o, i, w);
  }

 private:
  backend::Backend& be_;
};

// The device tensor's bytes, in its own dtype.
std::vector<uint8_t> device_bytes(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::host(t.dtype(), t.shape());
  be.to_host(t, h);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.bytes());
}

class StoredDtypeLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend::cuda_built()) GTEST_SKIP() << "this dayzero was built without CUDA";
    auto n = backend::cuda_device_count();
    if (!n.ok()) GTEST_SKIP() << "the CUDA runtime cannot count devices: " << n.status().message();
    if (*n == 0) GTEST_SKIP() << "no CUDA device is visible";
  }
  void TearDown() override {
    for (const auto& d : dirs_) fs::remove_all(d);
  }
  runtime::ModelInfo make(DType dtype) {
    const fs::path dir = fs::temp_directory_path() / ("dayzero-stored-" + std::to_string(getpid()) + "-" +
                                                      std::to_string(dirs_.size()));
    dirs_.push_back(dir);
    tools::MakeModelOptions o;
    o.family = "llama";
    o.out_dir = dir.string();
    o.dtype = dtype;
    o.seed = 5;
    EXPECT_TRUE(tools::make_model(o).ok());
    auto info = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
    EXPECT_TRUE(info.ok()) << info.status().message();
    return std::move(info).value();
  }
  std::vector<fs::path> dirs_;
};

TEST_F(StoredDtypeLoad, SameDeviceBitsAsTheF32Crossing) {
  for (DType stored : {DType::kBF16, DType::kF16}) {
    const runtime::ModelInfo m = make(stored);
    for (DType compute : {DType::kBF16, DType::kF32}) {
      backend::BackendOptions bo;
      bo.kind = "cuda";
      bo.compute_dtype = compute;
      auto made = backend::make_backend(bo);
      ASSERT_TRUE(made.ok()) << made.status().message();
      backend::Backend& gpu = **made;
      ASSERT_TRUE(gpu.wants_stored_dtype());
      F32Crossing f32(gpu);
      using W = std::optional<plan::WeightsOnDevice>;
      for (W w : {W{}, W{plan::WeightsOnDevice::kAsStored}, W{plan::WeightsOnDevice::kBF16},
                  W{plan::WeightsOnDevice::kF32}}) {
        const std::string what = std::string(dtype_name(stored)) + " model, compute " + dtype_name(compute) +
                                 ", weights_on_device " + (w ? std::to_string(static_cast<int>(*w)) : "unset");
        model::Weights a, b;
        std::vector<checkpoint::WeightRecord> ra, rb;
        ASSERT_TRUE(runtime::load_weights(m, gpu, a, ra, {}, {}, checkpoint::kDefaultStagingBytes, 1, w).ok()) << what;
        ASSERT_TRUE(runtime::load_weights(m, f32, b, rb, {}, {}, checkpoint::kDefaultStagingBytes, 1, w).ok()) << what;
        ASSERT_EQ(ra.size(), rb.size()) << what;
        for (size_t i = 0; i < ra.size(); ++i) {
          EXPECT_EQ(ra[i].name, rb[i].name) << what;
          EXPECT_EQ(ra[i].checksum, rb[i].checksum) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].bytes_read, rb[i].bytes_read) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].reads, rb[i].reads) << what << ": " << ra[i].name;
          EXPECT_EQ(ra[i].nan_count + ra[i].inf_count, rb[i].nan_count + rb[i].inf_count) << what;
        }
        int compared = 0;
        for (const auto& spec : m.specs) {
          const Tensor* ta = a.find(spec.name);
          const Tensor* tb = b.find(spec.name);
          ASSERT_EQ(ta == nullptr, tb == nullptr) << what << ": " << spec.name;
          if (!ta) continue;
          EXPECT_EQ(ta->dtype(), tb->dtype()) << what << ": " << spec.name;
          EXPECT_EQ(ta->shape(), tb->shape()) << what << ": " << spec.name;
          EXPECT_TRUE(device_bytes(gpu, *ta) == device_bytes(gpu, *tb)) << what << ": " << spec.name;
          ++compared;
        }
        EXPECT_GT(compared, 5) << what;
        std::printf("%s: %d weights bit-identical\n", what.c_str(), compared);
      }
    }
  }
}

// Negative control: one element one ulp off (in bf16) is seen by the byte comparison.
TEST_F(StoredDtypeLoad, AnUlpOffIsSeen) {
  backend::BackendOptions bo;
  bo.kind = "cuda";
  bo.compute_dtype = DType::kBF16;
  auto made = backend::make_backend(bo);
  ASSERT_TRUE(made.ok()) << made.status().message();
  backend::Backend& gpu = **made;
  Tensor h = Tensor::host(DType::kBF16, {3, 5});
  auto* p = static_cast<uint16_t*>(h.data());
  for (int i = 0; i < 15; ++i) p[i] = static_cast<uint16_t>(0x3f80 + i);
  Tensor wide = Tensor::host(DType::kF32, {3, 5});
  convert_to_f32(DType::kBF16, static_cast<const uint8_t*>(h.data()), wide.f32(), 15);
  const auto same = device_bytes(gpu, gpu.to_device_weight(h, DType::kBF16));
  EXPECT_TRUE(same == device_bytes(gpu, gpu.to_device_weight(wide, DType::kBF16)));
  wide.f32()[7] = bf16_to_f32(static_cast<uint16_t>(0x3f80 + 8));
  EXPECT_FALSE(same == device_bytes(gpu, gpu.to_device_weight(wide, DType::kBF16)));
}

}  // namespace
}  // namespace dayzero
