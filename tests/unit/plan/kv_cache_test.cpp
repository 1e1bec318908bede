// The KV-cache term of the memory model against hand counts for a GQA model (Llama-3.1-405B)
// and an MLA model (DeepSeek-V3), both opened from their published config.json through
// model_folder.h: batch x context rows per layer of the k and v the runtime keeps (MLA: the
// expanded per-head k and v padded to max(qk_head_dim, v_head_dim), not the latent), and
// the activations of a batch. Also the weight sizes plan_request.h gives from a config alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/fp4.h"
#include "model/fp4_specs.h"
#include "model/model_folder.h"
#include "plan/memory.h"
#include "plan/plan_request.h"

namespace dayzero::plan {
namespace {

model::ModelFolder open_fixture(const std::string& name) {
  auto m = model::open_model_folder(std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json",
                                    model::WeightsNeeded::kIfPresent);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : model::ModelFolder{};
}

MemoryParams params(const model::ModelFolder& m, int64_t context, int batch, int64_t bytes_per_activation) {
  MemoryParams p;
  p.cache = layer_caches(m.layers);
  p.max_context_tokens = context;
  p.batch = batch;
  p.bytes_per_activation = bytes_per_activation;
  return p;
}

TEST(KvCache, GqaHandCount) {
  const model::ModelFolder m = open_fixture("Meta-Llama-3.1-405B");
  ASSERT_EQ(m.hp.n_head_kv, 8);
  ASSERT_EQ(m.hp.head_dim, 128);
  EXPECT_FALSE(m.has_weights);
  // 63 layers of a stage, context 4096, 8 sequences resident, bf16.
  // tp=8: 1 kv head per rank: 2 (k, v) x 63 x 1 x 128 x 4096 x 8 x 2 B = 1,056,964,608 B.
  EXPECT_EQ(stage_cache(0, 63, 8, params(m, 4096, 8, 2)).kv, 1056964608);
  // tp=4: 2 kv heads per rank, twice that.
  EXPECT_EQ(stage_cache(0, 63, 4, params(m, 4096, 8, 2)).kv, 2113929216);
  // tp=16: the 8 kv heads are replicated on pairs of ranks, 1 head each, as with tp=8.
  EXPECT_EQ(stage_cache(0, 63, 16, params(m, 4096, 8, 2)).kv, 1056964608);
  // One sequence holds an eighth of it.
  EXPECT_EQ(stage_cache(0, 63, 8, params(m, 4096, 1, 2)).kv, 1056964608 / 8);
}

TEST(KvCache, MlaHandCount) {
  const model::ModelFolder m = open_fixture("DeepSeek-V3");
  ASSERT_GT(m.hp.deepseek().mla.kv_lora_rank, 0);
  // The cache holds every head's expanded k (nope 128 + rope 64) and v (128), both padded to
  // max(192, 128) = 192 (model/blocks/mla.h), 128 heads split over tp.
  // tp=8, all 61 layers, context 4096, 8 sequences, bf16:
  // 2 x 61 x 16 x 192 x 4096 x 8 x 2 B = 24,561,844,224 B.
  EXPECT_EQ(stage_cache(0, 61, 8, params(m, 4096, 8, 2)).kv, 24561844224);
  // f32 (the CPU backend), one sequence: 2 x 61 x 16 x 192 x 4096 x 1 x 4 B.
  EXPECT_EQ(stage_cache(0, 61, 8, params(m, 4096, 1, 4)).kv, 6140461056);
}

TEST(KvCache, ActivationsOfABatch) {
  const model::ModelFolder m = open_fixture("Meta-Llama-3.1-405B");
  // T = context x batch rows of every buffer, so a batch of 3 is three times one sequence.
  const int64_t one = activation_bytes(m.hp, 8, true, params(m, 1000, 1, 2));
  EXPECT_GT(one, 0);
  EXPECT_EQ(activation_bytes(m.hp, 8, true, params(m, 1000, 3, 2)), 3 * one);
}

TEST(PlanRequestBuilder, WeightSizesFromConfigAlone) {
  // Llama-3.1-405B's config.json says bfloat16: every weight 2 B, no per-spec sizes.
  const model::ModelFolder llama = open_fixture("Meta-Llama-3.1-405B");
  auto w = weight_sizes(llama, WeightsOnDevice::kAsStored);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->bytes_per_weight, 2);
  EXPECT_TRUE(w->stored_bytes.empty());
  // DeepSeek-V3 is fp8-quantized: the block-quantized Linears 1 B, their scales 4 B, the rest 2 B.
  const model::ModelFolder ds = open_fixture("DeepSeek-V3");
  auto q = weight_sizes(ds, WeightsOnDevice::kAsStored);
  ASSERT_TRUE(q.ok()) << q.status().message();
  ASSERT_EQ(q->stored_bytes.size(), ds.specs.size());
  EXPECT_EQ(q->stored_bytes, stored_bytes_from_config(ds.specs, 2));
  // Converted: one size, whatever is stored.
  auto f = weight_sizes(ds, WeightsOnDevice::kF32);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->bytes_per_weight, 4);
  EXPECT_TRUE(f->stored_bytes.empty());
}

// The CPU keeps block-scaled FP8 as stored (1 B an element plus its f32 block scales) and
// pack-quantized INT4 too (0.5 B an element plus a bf16 scale per group of 32); a backend that
// keeps neither counts both at 4 B.
TEST(PlanRequestBuilder, CpuCountsFp8AndInt4AsStored) {
  const model::ModelFolder ds = open_fixture("DeepSeek-V3");
  auto cpu = weight_sizes(ds, WeightsOnDevice::kAsStored, kCpuKeepsQuantized);
  auto none = weight_sizes(ds, WeightsOnDevice::kAsStored, kKeepsNoQuantized);
  ASSERT_TRUE(cpu.ok() && none.ok());
  MemoryParams kept, f32;
  kept.stored_bytes = cpu->stored_bytes;
  f32.stored_bytes = none->stored_bytes;
  int64_t fp8_kept = 0, fp8_f32 = 0, want_kept = 0, n_fp8 = 0;
  for (size_t i = 0; i < ds.specs.size(); ++i) {
    const model::TensorSpec& s = ds.specs[i];
    if (!model::is_stored_weight(s, StoredScheme::kFp8Block) || s.skip_load) continue;
    const Slice whole{true};
    const int64_t numel = s.shape[0] * s.shape[1];
    fp8_kept += held_bytes(s, i, whole, kept);
    fp8_f32 += held_bytes(s, i, whole, f32);
    want_kept += numel + (s.shape[0] + 127) / 128 * ((s.shape[1] + 127) / 128) * kScaleBytes;
    ++n_fp8;
    EXPECT_EQ(kept_dtype(s, DType::kF8_E4M3, WeightsOnDevice::kAsStored, kCpuKeepsQuantized), DType::kF8_E4M3);
  }
  ASSERT_GT(n_fp8, 1000);
  EXPECT_EQ(fp8_kept, want_kept);
  EXPECT_GT(fp8_f32, 0);
  // 4 B against 1 B + 4 B per 128 x 128 block: a factor just under 4.
  EXPECT_GT(static_cast<double>(fp8_f32) / static_cast<double>(fp8_kept), 3.99);
  EXPECT_LT(static_cast<double>(fp8_f32) / static_cast<double>(fp8_kept), 4.0);

  // Kimi-K2.5's INT4 experts: 0.5 B + bf16 group scales kept, 4 B where dequantised on load.
  const model::ModelFolder kimi = open_fixture("Kimi-K2.5");
  auto int4_cpu = weight_sizes(kimi, WeightsOnDevice::kAsStored, kCpuKeepsQuantized);
  auto int4_none = weight_sizes(kimi, WeightsOnDevice::kAsStored, kKeepsNoQuantized);
  ASSERT_TRUE(int4_cpu.ok() && int4_none.ok()) << int4_cpu.status().message();
  MemoryParams int4_kept, int4_f32;
  int4_kept.stored_bytes = int4_cpu->stored_bytes;
  int4_f32.stored_bytes = int4_none->stored_bytes;
  int packed = 0;
  for (size_t i = 0; i < kimi.specs.size(); ++i) {
    const model::TensorSpec& s = kimi.specs[i];
    if (!model::is_stored_weight(s, StoredScheme::kInt4Group)) continue;
    ++packed;
    EXPECT_NE(int4_cpu->stored_bytes[i], 4) << s.name;
    EXPECT_EQ(int4_none->stored_bytes[i], 4) << s.name;
    // `stored` of a pack-quantized weight: its group scales' dtype; only BF16 ones are kept.
    EXPECT_EQ(kept_dtype(s, DType::kBF16, WeightsOnDevice::kAsStored, kCpuKeepsQuantized), DType::kI4);
    EXPECT_EQ(kept_dtype(s, DType::kF32, WeightsOnDevice::kAsStored, kCpuKeepsQuantized), DType::kF32);
    const KeepsQuantized none = kKeepsNoQuantized;
    EXPECT_EQ(kept_dtype(s, DType::kBF16, WeightsOnDevice::kAsStored, none), DType::kF32);
    const Slice whole{true};
    const int64_t numel = s.shape[0] * s.shape[1];
    ASSERT_EQ(s.shape[1] % 32, 0) << s.name;
    EXPECT_EQ(held_bytes(s, i, whole, int4_kept), numel / 2 + numel / 32 * 2) << s.name;
    EXPECT_EQ(held_bytes(s, i, whole, int4_f32), numel * 4) << s.name;
    // A column slice starting inside a word and a group: the 10 words and 3 groups covering it.
    const Slice cols{true, 1, 45, 45 + 71};
    EXPECT_EQ(held_bytes(s, i, cols, int4_kept), s.shape[0] * (10 * 4 + 3 * 2)) << s.name;
  }
  EXPECT_GT(packed, 0);
  EXPECT_NE(int4_cpu->label.find("int4 pack-quantized Linear weights 0.5 B + bf16 group scales"), std::string::npos)
      << int4_cpu->label;
  EXPECT_EQ(int4_cpu->label.find("dequantised"), std::string::npos) << int4_cpu->label;
  EXPECT_NE(int4_none->label.find("int4 weights dequantised to float32 on load"), std::string::npos)
      << int4_none->label;
}

TEST(PlanRequestBuilder, ResidentBatch) {
  EXPECT_EQ(resident_batch(8, 3), 3);   // fewer prompts than max_batch: all resident
  EXPECT_EQ(resident_batch(8, 20), 8);  // more: max_batch at a time
  EXPECT_EQ(resident_batch(8, 0), 1);
}

// DeepSeek-V3's config with its routed experts in MXFP4 (compressed-tensors, every other Linear
// ignored, as make-model writes it): each expert weight counts 0.5 B an element plus one byte
// per 32 (plan::stored_slice, the stored-format table), whole and as a column slice starting inside
// a group; 4 B where the backend keeps no FP4; the experts' bytes against bf16's: 2 / (0.5 + 1/32)
// = 3.76x fewer.
TEST(StoredWeightSizes, Mxfp4ExpertsCountValuesAndScales) {
  auto cfg = model::read_config_json(std::string(DAYZERO_FIXTURES_DIR) + "/configs/DeepSeek-V3/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  nlohmann::json c = *cfg;
  c.erase("quantization_config");
  const std::string dir = ::testing::TempDir() + "/dz-mxfp4-config";
  std::filesystem::create_directories(dir);
  const auto write = [&](const nlohmann::json& j) { std::ofstream(dir + "/config.json") << j.dump(); };
  write(c);
  auto plain = model::open_model_folder(dir + "/config.json", model::WeightsNeeded::kIfPresent);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  c["quantization_config"] = checkpoint::fp4_quant_config(StoredScheme::kMxfp4, model::fp4_ignore_list(plain->specs));
  write(c);
  auto m = model::open_model_folder(dir + "/config.json", model::WeightsNeeded::kIfPresent);
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto kept = weight_sizes(*m, WeightsOnDevice::kAsStored, kCpuKeepsQuantized);
  auto none = weight_sizes(*m, WeightsOnDevice::kAsStored, KeepsQuantized{{true, true, false, false}, false});
  ASSERT_TRUE(kept.ok() && none.ok()) << kept.status().message();
  EXPECT_NE(kept->label.find("mxfp4 expert weights 0.5 B + a scale byte per 32"), std::string::npos) << kept->label;
  EXPECT_NE(none->label.find("fp4 weights dequantised to float32 on load"), std::string::npos) << none->label;
  MemoryParams pk, pn;
  pk.stored_bytes = kept->stored_bytes;
  pn.stored_bytes = none->stored_bytes;
  int64_t n_fp4 = 0, fp4_bytes_total = 0, elements = 0;
  for (size_t i = 0; i < m->specs.size(); ++i) {
    const model::TensorSpec& s = m->specs[i];
    if (!model::is_stored_weight(s, StoredScheme::kMxfp4)) {
      EXPECT_TRUE(s.stored.format == nullptr || s.skip_load) << s.name;
      continue;
    }
    ++n_fp4;
    EXPECT_EQ(s.component, model::Component::kRoutedExpert) << s.name;
    EXPECT_EQ(kept_dtype(s, DType::kF32, WeightsOnDevice::kAsStored, kCpuKeepsQuantized), DType::kF4) << s.name;
    EXPECT_EQ(kept_dtype(s, DType::kF32, WeightsOnDevice::kAsStored, KeepsQuantized{{true, true, false, false}, false}),
              DType::kF32);
    const int64_t numel = s.shape[0] * s.shape[1];
    const Slice whole{true};
    EXPECT_EQ(held_bytes(s, i, whole, pk), numel / 2 + numel / 32) << s.name;
    EXPECT_EQ(held_bytes(s, i, whole, pn), numel * 4) << s.name;
    // Columns 45..301: bytes 22..150 (129) and groups 1..9 (9) of each row.
    const Slice cols{true, 1, 45, 301};
    EXPECT_EQ(held_bytes(s, i, cols, pk), s.shape[0] * (129 + 9)) << s.name;
    fp4_bytes_total += held_bytes(s, i, whole, pk);
    elements += numel;
  }
  // A config that also quantizes attention is refused naming the module (FP4 is kept for routed
  // experts only); control: the ignore list above.
  c["quantization_config"] = checkpoint::fp4_quant_config(StoredScheme::kMxfp4, {"lm_head"});
  write(c);
  auto refused = model::open_model_folder(dir + "/config.json", model::WeightsNeeded::kIfPresent);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().exit_code(), 2);
  EXPECT_NE(refused.status().message().find("routed experts only"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("model.layers.0.self_attn"), std::string::npos) << refused.status().message();
  // 58 MoE layers x 256 experts x 3 weights.
  EXPECT_EQ(n_fp4, 58 * 256 * 3);
  const double ratio = static_cast<double>(2 * elements) / static_cast<double>(fp4_bytes_total);
  EXPECT_NEAR(ratio, 2.0 / (0.5 + 1.0 / 32.0), 1e-9);
  std::printf("DeepSeek-V3 routed experts: %lld parameters, %lld bytes in MXFP4, %.4fx fewer than bf16\n",
              static_cast<long long>(elements), static_cast<long long>(fp4_bytes_total), ratio);
}

}  // namespace
}  // namespace dayzero::plan
