// runtime::load_weights for a backend that wants_stored_dtype(), on the CPU: a stand-in device
// that takes BF16/F16 host tensors as stored and widens them itself (as the CUDA backend does on
// its device) ends up with the same weights, bit for bit, and the same records as the CPU
// backend's f32 hand-over, for tiny BF16 and F16 llamas, whole and split over tp 2; every 2-byte
// tensor reaches it as stored, so half the f32 bytes cross (backend::WeightStaging). The
// reference is the CPU backend made without cpu_keeps_stored (wants_stored_dtype false) loading
// under float32: f32 handed over and kept.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "backend/weight_staging.h"
#include "model/registry.h"
#include "plan/memory.h"
#include "runtime/model_loader.h"
#include "tests/unit/runtime/forwarding_backend.h"
#include "tests/unit/runtime/same_load.h"
#include "tests/unit/runtime/tiny_models.h"

namespace dayzero {
namespace {

// The CPU backend, taking weights as stored and widening them on "its device".
class StoredDevice final : public test_util::ForwardingBackend {
 public:
  bool wants_stored_dtype() const override { return true; }
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

  uint64_t crossed_ = 0, f32_bytes_ = 0;
  int as_stored_ = 0;
};

// Rank 1 of a tp 2 split when `split` (the second half of o_proj's and down_proj's columns and
// of every other matrix's rows), else every tensor whole.
runtime::SliceFn tp2_rank1_slices(bool split) {
  return [split](const model::TensorSpec& spec) -> runtime::TensorSlice {
    if (!split || spec.shape.size() != 2) return {};
    const int dim =
        spec.name.find("o_proj") != std::string::npos || spec.name.find("down_proj") != std::string::npos ? 1 : 0;
    return {true, dim, spec.shape[dim] / 2, spec.shape[dim]};
  };
}

class StoredDtypeLoadCpu : public ::testing::Test {
 protected:
  runtime::ModelInfo make(DType dtype) { return models_.make("llama", dtype); }
  test_util::TinyModels models_{"sdl", 9};
};

TEST_F(StoredDtypeLoadCpu, SameWeightsAndRecordsAsTheF32HandOver) {
  for (DType stored : {DType::kBF16, DType::kF16}) {
    const runtime::ModelInfo m = make(stored);
    // A column and a row split (tp 2, rank 1 of 2): the second half of every split dim.
    for (bool split : {false, true}) {
      const runtime::SliceFn slice_of = tp2_rank1_slices(split);
      const std::string what = std::string(dtype_name(stored)) + (split ? ", split" : ", whole");
      auto cpu = backend::make_backend({});
      ASSERT_TRUE(cpu.ok());
      ASSERT_FALSE((*cpu)->wants_stored_dtype());
      for (plan::WeightsOnDevice w : {plan::WeightsOnDevice::kAsStored, plan::WeightsOnDevice::kF32}) {
        StoredDevice dev;
        model::Weights a, b;
        std::vector<checkpoint::WeightRecord> ra, rb;
        ASSERT_TRUE(runtime::load_weights(m, **cpu, a, ra, {}, slice_of, checkpoint::kDefaultStagingBytes, 2,
                                          plan::WeightsOnDevice::kF32)
                        .ok());
        ASSERT_TRUE(runtime::load_weights(m, dev, b, rb, {}, slice_of, checkpoint::kDefaultStagingBytes, 2, w).ok());
        test_util::expect_same_records(ra, rb, what);
        const int compared = test_util::each_weight_pair(
            m, a, b, what, [&](const std::string& name, const Tensor& ta, const Tensor& tb) {
              ASSERT_EQ(ta.dtype(), DType::kF32);
              ASSERT_EQ(tb.dtype(), DType::kF32);
              ASSERT_EQ(ta.shape(), tb.shape()) << what << ": " << name;
              EXPECT_EQ(std::memcmp(ta.data(), tb.data(), ta.bytes()), 0) << what << ": " << name;
            });
        EXPECT_GT(compared, 5) << what;
        EXPECT_EQ(dev.as_stored_, compared) << what << ": every tensor reached the device as stored";
        EXPECT_EQ(dev.crossed_ * 2, dev.f32_bytes_) << what << ": half the f32 bytes cross";
      }
    }
  }
}

// The CPU backend keeping block-scaled FP8 as stored (cpu_keeps_stored): a tiny FP8 deepseek_v3,
// whole and split over tp 2 (slices that start inside a block), against the same backend
// dequantising on load (float32). Each FP8 weight widens (to_host) to the dequantised weight's
// bits, and its products at m = 1, 5 (the small-M kernel) and 20 (the dequantised panels) have
// the f32 weight's bits; the scales it holds are counted for the plan (weight_scale_bytes).
TEST_F(StoredDtypeLoadCpu, Fp8KeptAsStoredHasTheDequantisedBits) {
  const runtime::ModelInfo m = models_.make("deepseek_v3", DType::kF8_E4M3);
  for (bool split : {false, true}) {
    const runtime::SliceFn slice_of = tp2_rank1_slices(split);
    const std::string what = split ? "split" : "whole";
    backend::BackendOptions keep;
    keep.cpu_keeps_stored = true;
    auto kept = backend::make_backend(keep);
    auto ref = backend::make_backend({});
    ASSERT_TRUE(kept.ok() && ref.ok());
    ASSERT_TRUE((*kept)->keeps_stored(StoredScheme::kFp8Block));
    ASSERT_FALSE((*ref)->keeps_stored(StoredScheme::kFp8Block));
    model::Weights a, b;
    std::vector<checkpoint::WeightRecord> ra, rb;
    ASSERT_TRUE(runtime::load_weights(m, **ref, a, ra, {}, slice_of, checkpoint::kDefaultStagingBytes, 2,
                                      plan::WeightsOnDevice::kF32)
                    .ok());
    ASSERT_TRUE(runtime::load_weights(m, **kept, b, rb, {}, slice_of, checkpoint::kDefaultStagingBytes, 2,
                                      plan::WeightsOnDevice::kAsStored)
                    .ok());
    int fp8 = 0;
    int64_t scale_bytes = 0;
    uint32_t seed = 1;
    test_util::each_weight_pair(m, a, b, what, [&](const std::string& name, const Tensor& ta, const Tensor& tb) {
      if (tb.dtype() != DType::kF8_E4M3) return;
      ++fp8;
      ASSERT_EQ(ta.dtype(), DType::kF32);
      ASSERT_EQ(ta.shape(), tb.shape()) << what << ": " << name;
      Tensor wide = Tensor::host(DType::kF32, tb.shape());
      (*kept)->to_host(tb, wide);
      EXPECT_EQ(std::memcmp(ta.data(), wide.data(), ta.bytes()), 0) << what << ": " << name << " widened";
      const int64_t n = tb.dim(0), k = tb.dim(1);
      for (int64_t rows : {1, 5, 20}) {
        Tensor x = Tensor::host(DType::kF32, {rows, k});
        for (int64_t i = 0; i < x.numel(); ++i) {
          seed = seed * 1664525u + 1013904223u;
          x.f32()[i] = static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
        }
        Tensor ya = Tensor::host(DType::kF32, {rows, n}), yb = Tensor::host(DType::kF32, {rows, n});
        (*ref)->matmul(x, ta, ya);
        (*kept)->matmul(x, tb, yb);
        EXPECT_EQ(std::memcmp(ya.data(), yb.data(), ya.bytes()), 0) << what << ": " << name << " m=" << rows;
      }
      const StoredSlice sl{&stored_format(StoredScheme::kFp8Block), n, k, 0, 0, 128, 128};
      scale_bytes += sl.scale_bytes();  // at least one block each
    });
    EXPECT_GT(fp8, 5) << what << ": the FP8 Linears kept as stored";
    EXPECT_GE((*kept)->memory_info().weight_scale_bytes, scale_bytes) << what;
    EXPECT_EQ((*ref)->memory_info().weight_scale_bytes, 0) << what;
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
