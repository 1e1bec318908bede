// The device's weight bytes against the plan's, on the CPU: every rank's slices of a tiny bf16
// llama and a tiny block-FP8 deepseek_v3 loaded through runtime::load_weights into a backend
// that counts what a device keeping them as the plan says would allocate (plan::kept_dtype, FP8
// bytes and the scale blocks the loader actually read), compared with the plan's per-rank
// weights (plan::held_bytes); and the GEMM workspace bounds those placements reach against the
// ones planned before the load (runtime/gemm_workspace_plan.h), which the CUDA plan check counts.
// Not the CUDA allocation itself (cuda_e2e_test measures that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/gemm_workspace.h"
#include "model/stored_specs.h"
#include "plan/plan_request.h"
#include "plan/planner.h"
#include "plan/slicing.h"
#include "runtime/gemm_workspace_plan.h"
#include "runtime/model_loader.h"
#include "tests/unit/runtime/forwarding_backend.h"
#include "tests/unit/runtime/tiny_models.h"
#include "tools/make_model.h"

namespace dayzero {
namespace {

// The CPU backend, counting weights as a device keeping them would hold them.
class CountingBackend final : public test_util::ForwardingBackend {
 public:
  explicit CountingBackend(bool count_scales, DType compute = DType::kBF16) : ws_(compute), scales_(count_scales) {}
  // Each placement noted in the GEMM workspace bounds as CudaBackend notes it.
  Tensor to_device_weight(const Tensor& h, DType kept) override {
    bytes_ += h.numel() * static_cast<int64_t>(dtype_size(kept));
    ws_.note_weight(h.shape(), kept);
    return h;
  }
  bool keeps_stored(StoredScheme s) const override { return s == StoredScheme::kFp8Block; }
  Tensor to_device_stored(const StoredWeightSlice& w) override {
    EXPECT_EQ(w.values.shape(), (Shape{w.slice.rows, w.slice.cols}));
    EXPECT_EQ(w.scale.numel(), w.slice.scale_rows() * w.slice.scale_cols());
    // What was read, not the formula: one byte per element plus every f32 scale block loaded.
    bytes_ += w.values.numel() + (scales_ ? w.scale.numel() * w.slice.format->scale_bytes : 0);
    if (w.slice.row0 % w.slice.block_rows != 0 || w.slice.col0 % w.slice.block_cols != 0) ++inside_block_;
    ++fp8_;
    ws_.note_stored(w.slice.rows, w.slice.cols);
    return w.values;
  }

  backend::GemmWorkspaceBounds ws_;
  int64_t bytes_ = 0;
  int fp8_ = 0, inside_block_ = 0;

 private:
  bool scales_;
};

class DeviceWeightBytes : public ::testing::Test {
 protected:
  runtime::ModelInfo make(const std::string& family, DType dtype) { return models_.make(family, dtype); }
  // Per rank: (counted device bytes, the plan's weights), and the FP8 counts of all ranks.
  // gemm_*: the GEMM workspace bounds the placements reached and the ones planned before the
  // load (with plan_w as the weights policy), for max_tokens 64.
  struct Rank {
    int64_t device = 0, plan = 0;
    backend::GemmWorkspaceBounds::Bytes gemm_device, gemm_planned;
  };
  std::vector<Rank> compare(const runtime::ModelInfo& m, int tp, int pp, plan::WeightsOnDevice w, bool count_scales,
                            int* fp8 = nullptr, int* inside = nullptr, DType compute = DType::kBF16,
                            std::optional<plan::WeightsOnDevice> plan_w = std::nullopt) {
    plan::RequestInputs in;
    in.topo.nodes = 1;
    in.topo.gpus_per_node = tp * pp;
    in.topo.device_memory_bytes = int64_t{80} << 30;
    in.world_size = tp * pp;
    in.tp = tp;
    in.pp = pp;
    in.weights = w;
    in.bytes_per_activation = 4;
    in.context_tokens = 64;
    auto req = plan::make_plan_request(m, in);
    EXPECT_TRUE(req.ok()) << req.status().message();
    auto plan = plan::choose_plan(*req);
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    const plan::EdgeNames names = plan::edge_names(*m.adapter, m.hp);
    std::vector<Rank> out;
    for (int r = 0; r < tp * pp; ++r) {
      CountingBackend be(count_scales, compute);
      model::Weights weights;
      std::vector<checkpoint::WeightRecord> recs;
      const runtime::SliceFn slice_of = [&](const model::TensorSpec& spec) {
        const plan::Slice s = plan::slice_for(spec, m.hp, *plan, r, names);
        return runtime::TensorSlice{s.held, s.dim, s.begin, s.end, s.rows};
      };
      const auto st = runtime::load_weights(m, be, weights, recs, {}, slice_of, checkpoint::kDefaultStagingBytes, 1, w);
      EXPECT_TRUE(st.ok()) << st.status().message();
      const auto stored_of = [&](const model::TensorSpec& spec) { return model::checkpoint_dtype(spec, m.catalog); };
      out.push_back({be.bytes_, plan->memory.at(r).weights, be.ws_.bounds(64),
                     runtime::planned_gemm_workspaces(m.specs, slice_of, stored_of, plan_w.value_or(w), compute, 64)});
      std::printf("%s tp%d pp%d %s rank %d: device %lld bytes, plan %lld (%d FP8 slices, %d starting inside a block)\n",
                  m.hp.model_type.c_str(), tp, pp, w == plan::WeightsOnDevice::kAsStored ? "as_stored" : "converted", r,
                  static_cast<long long>(be.bytes_), static_cast<long long>(plan->memory.at(r).weights), be.fp8_,
                  be.inside_block_);
      if (fp8) *fp8 += be.fp8_;
      if (inside) *inside += be.inside_block_;
    }
    return out;
  }
  test_util::TinyModels models_{"dwb", 3};
};

// The CPU keeps the loader's tensors as its weights: all of them in one arena, back to back.
TEST_F(DeviceWeightBytes, CpuWeightsShareOneArena) {
  const runtime::ModelInfo m = make("llama", DType::kBF16);
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  model::Weights weights;
  std::vector<checkpoint::WeightRecord> recs;
  ASSERT_TRUE(runtime::load_weights(m, **be, weights, recs, {}, {}, checkpoint::kDefaultStagingBytes, 1).ok());
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  size_t padded = 0;
  for (const auto& r : recs) {
    const Tensor& t = weights.get(r.name);
    const auto a = reinterpret_cast<uintptr_t>(t.data());
    lo = std::min(lo, a);
    hi = std::max(hi, a + t.bytes());
    padded += HostArena::padded(t.bytes());
  }
  ASSERT_GT(recs.size(), 10u);
  EXPECT_LE(hi - lo, padded) << "the weights are not in one allocation";
}

TEST_F(DeviceWeightBytes, Bf16LlamaEqualsThePlanOnEveryRank) {
  const runtime::ModelInfo m = make("llama", DType::kBF16);
  for (auto [tp, pp] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}})
    for (const auto& r : compare(m, tp, pp, plan::WeightsOnDevice::kAsStored, true)) {
      EXPECT_GT(r.plan, 0);
      EXPECT_EQ(r.device, r.plan) << "tp" << tp << " pp" << pp;
    }
}

// The other families the CUDA e2e test runs (vision tower and projector, MoE, DSA indexer, linear
// attention), converted to bfloat16 on the device as that test runs them, and as stored.
TEST_F(DeviceWeightBytes, EveryFamilyEqualsThePlan) {
  for (const char* family : {"qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v32", "llava", "qwen3_next"}) {
    const runtime::ModelInfo m = make(family, DType::kF32);
    for (auto w : {plan::WeightsOnDevice::kBF16, plan::WeightsOnDevice::kAsStored})
      for (const auto& r : compare(m, 2, 1, w, true)) {
        EXPECT_GT(r.plan, 0) << family;
        EXPECT_EQ(r.device, r.plan) << family << (w == plan::WeightsOnDevice::kBF16 ? " bfloat16" : " as stored");
      }
  }
}

TEST_F(DeviceWeightBytes, Fp8DeepseekKeptAsStoredEqualsThePlanOnEveryRank) {
  const runtime::ModelInfo m = make("deepseek_v3", DType::kF8_E4M3);
  for (auto [tp, pp] : {std::pair{1, 1}, {2, 1}, {2, 2}}) {
    int fp8 = 0, inside = 0;
    for (const auto& r : compare(m, tp, pp, plan::WeightsOnDevice::kAsStored, true, &fp8, &inside))
      EXPECT_EQ(r.device, r.plan) << "tp" << tp << " pp" << pp;
    EXPECT_GT(fp8, 0) << "no FP8 weight reached the backend as stored";
    // Tensor-parallel slices of the tiny model's 128 x 128 blocks start inside a block.
    if (tp > 1) {
      EXPECT_GT(inside, 0);
    }
  }
  // Converted to bfloat16 on the device, FP8 weights count two bytes and no scales.
  for (const auto& r : compare(m, 2, 1, plan::WeightsOnDevice::kBF16, true)) EXPECT_EQ(r.device, r.plan);
}

// The GEMM workspaces planned before the load (what the CUDA plan check counts) equal the ones
// the loader's placements reach, for every family, bf16 and f32 compute, converted and as
// stored, on every rank of tp2 and pp2.
TEST_F(DeviceWeightBytes, PlannedGemmWorkspacesEqualThePlacements) {
  int nonzero = 0;
  for (const char* family : {"llama", "qwen3_moe", "deepseek_v3", "llava", "qwen3_next"}) {
    const bool fp8 = std::string(family) == "deepseek_v3";
    const runtime::ModelInfo m = make(family, fp8 ? DType::kF8_E4M3 : DType::kBF16);
    for (DType compute : {DType::kBF16, DType::kF32})
      for (auto w : {plan::WeightsOnDevice::kBF16, plan::WeightsOnDevice::kAsStored})
        for (auto [tp, pp] : {std::pair{2, 1}, {1, 2}})
          for (const auto& r : compare(m, tp, pp, w, true, nullptr, nullptr, compute)) {
            EXPECT_EQ(r.gemm_planned.weight, r.gemm_device.weight) << family << " tp" << tp << " pp" << pp;
            EXPECT_EQ(r.gemm_planned.activation, r.gemm_device.activation) << family << " tp" << tp << " pp" << pp;
            nonzero += r.gemm_device.weight + r.gemm_device.activation > 0 ? 1 : 0;
          }
  }
  EXPECT_GT(nonzero, 0);
}

// Negative control: planning the FP8 weights as converted to bfloat16 while they are kept as
// stored misses the weight workspace their dequantisation needs.
TEST_F(DeviceWeightBytes, PlanningTheWrongKeptDtypeIsCaught) {
  const runtime::ModelInfo m = make("deepseek_v3", DType::kF8_E4M3);
  for (const auto& r : compare(m, 2, 1, plan::WeightsOnDevice::kAsStored, true, nullptr, nullptr, DType::kBF16,
                               plan::WeightsOnDevice::kBF16)) {
    EXPECT_GT(r.gemm_device.weight, 0);
    EXPECT_EQ(r.gemm_planned.weight, 0);
  }
}

// Negative control: a device that left the scales out would hold less than the plan counts.
TEST_F(DeviceWeightBytes, LeavingOutTheScalesIsCaught) {
  const runtime::ModelInfo m = make("deepseek_v3", DType::kF8_E4M3);
  for (const auto& r : compare(m, 2, 1, plan::WeightsOnDevice::kAsStored, false)) EXPECT_LT(r.device, r.plan);
}

// The refusal of as_stored where a weight has no device form as stored: pack-quantized INT4 is
// refused naming the weight; block-scaled FP8 and bf16 are keepable.
TEST_F(DeviceWeightBytes, AsStoredRefusedOnlyWithoutADeviceForm) {
  EXPECT_TRUE(runtime::check_keepable_as_stored(make("llama", DType::kBF16)).ok());
  EXPECT_TRUE(runtime::check_keepable_as_stored(make("deepseek_v3", DType::kF8_E4M3)).ok());
  tools::MakeModelOptions o;
  o.family = "kimi_k25";
  o.shape.quant = "int4";
  const runtime::ModelInfo m = models_.make(o);
  const Status st = runtime::check_keepable_as_stored(m);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("pack-quantized INT4"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("use bfloat16"), std::string::npos) << st.message();
}

// The GEMM workspace bounds the CUDA backend allocates in reserve(): the largest converted
// weight (FP8 always, bf16 under f32 compute) and max_tokens x the widest bf16 GEMM input.
TEST(GemmWorkspace, BoundsFromThePlacedWeights) {
  backend::GemmWorkspaceBounds bf16(DType::kBF16);
  bf16.note_weight({64}, DType::kBF16);               // a vector: nothing
  bf16.note_weight({96, 48}, DType::kBF16);           // bf16 GEMM: rounds x [m, 48]
  bf16.note_weight({10, 3, 4, 4}, DType::kBF16);      // a patch weight: 48 in-features
  bf16.note_weight({32, 200}, DType::kF32);           // f32 GEMM: no x rounding, no conversion
  bf16.note_stored(40, 72);                              // dequantised to bf16: 40 x 72 x 2
  EXPECT_EQ(bf16.bounds(100).weight, 40 * 72 * 2);
  EXPECT_EQ(bf16.bounds(100).activation, 100 * 72 * 2);
  backend::GemmWorkspaceBounds f32(DType::kF32);
  f32.note_weight({96, 48}, DType::kBF16);            // widened to f32 before its GEMM
  f32.note_stored(40, 72);
  f32.note_weight({500, 500}, DType::kF32);           // used as it is
  EXPECT_EQ(f32.bounds(100).weight, 96 * 48 * 4);
  EXPECT_EQ(f32.bounds(100).activation, 0);
}

}  // namespace
}  // namespace dayzero
