// gpu: weights crossing PCIe in their stored dtype (BF16/F16 host tensors, converted on the
// device) against the same model loaded with every tensor crossing as host f32: every weight
// on the device bit for bit the same (dtype, shape, bytes) and the records the same, for tiny
// BF16 and F16 llamas under each model.weights_on_device and both compute dtypes. Negative
// control: a weight off by one ulp in one element is seen by the byte comparison. Skips where
// no GPU is visible.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "checkpoint/load.h"
#include "model/registry.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"
#include "tests/unit/cuda/gpu_visible.h"
#include "tests/unit/runtime/forwarding_backend.h"
#include "tests/unit/runtime/same_load.h"
#include "tests/unit/runtime/tiny_models.h"

namespace dayzero {
namespace {

// The CUDA backend with the loader's f32 hand-over (wants_stored_dtype false): what every load
// did before. Forwards everything else.
class F32Crossing final : public test_util::ForwardingBackend {
 public:
  explicit F32Crossing(backend::Backend& be) : ForwardingBackend(be) {}
  Tensor to_device_weight(const Tensor& h) override {
    EXPECT_EQ(h.dtype(), DType::kF32);
    return inner().to_device_weight(h);
  }
  Tensor to_device_weight(const Tensor& h, DType kept) override {
    EXPECT_EQ(h.dtype(), DType::kF32);
    return inner().to_device_weight(h, kept);
  }
  bool wants_stored_dtype() const override { return false; }
  bool keeps_stored(StoredScheme) const override { return false; }
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
    if (const std::string why = test_util::why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
  }
  runtime::ModelInfo make(DType dtype) { return models_.make("llama", dtype); }
  test_util::TinyModels models_{"stored", 5};
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
        test_util::expect_same_records(ra, rb, what);
        const int compared = test_util::each_weight_pair(
            m, a, b, what, [&](const std::string& name, const Tensor& ta, const Tensor& tb) {
              EXPECT_EQ(ta.dtype(), tb.dtype()) << what << ": " << name;
              EXPECT_EQ(ta.shape(), tb.shape()) << what << ": " << name;
              EXPECT_TRUE(device_bytes(gpu, ta) == device_bytes(gpu, tb)) << what << ": " << name;
            });
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
