// The kimi_k25 adapter on Kimi-K2.5's published config.json: the inventory has the MoonViT
// tower, the patchmerger projector and the INT4 routed experts (weight_packed / weight_scale /
// weight_shape) with the shapes the published layout implies, everything else of the text
// model in bf16 under language_model.; totals and activated counts from inspect; refusals of
// what the adapter cannot honour. Also the pack-quantized format itself (checkpoint/
// pack_quantized.h): the ignore list, the bit order against hand-packed words, slices.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "checkpoint/pack_quantized.h"
#include "checkpoint/writer.h"
#include "core/dtype.h"
#include "model/inspect.h"
#include "model/registry.h"

namespace dayzero::model {
namespace {

namespace fs = std::filesystem;

nlohmann::json published() {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/Kimi-K2.5/config.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

TEST(KimiK25, PublishedInventory) {
  const auto cfg = published();
  auto a = find_adapter(cfg);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "kimi_k25");
  auto hp = (*a)->parse_hparams(cfg);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  EXPECT_EQ(hp->n_embd, 7168);
  EXPECT_EQ(hp->n_layer, 61);
  EXPECT_EQ(hp->n_expert, 384);
  EXPECT_FALSE(hp->tie_embeddings);
  const VisionParams& vp = hp->vision;
  EXPECT_EQ(vp.n_embd, 1152);
  EXPECT_EQ(vp.n_layer, 27);
  EXPECT_EQ(vp.n_head, 16);
  EXPECT_EQ(vp.merge_kernel, 2);
  EXPECT_EQ(vp.projector_hidden, 4608);
  EXPECT_EQ(vp.image_token_id, 163605);
  EXPECT_EQ(vp.act, VisionParams::Act::kGeluTanh);
  EXPECT_EQ(vp.projector_act, VisionParams::Act::kGelu);
  EXPECT_EQ(vp.pos_embed, VisionParams::PosEmbed::kLearnedResampled);
  EXPECT_EQ(vp.rope, VisionParams::Rope2d::kInterleaved);

  std::map<std::string, TensorSpec> by;
  for (const auto& s : (*a)->tensor_specs(*hp)) by[s.name] = s;
  auto shape = [&](const std::string& n) {
    EXPECT_TRUE(by.count(n)) << n;
    return by.count(n) ? by[n].shape : Shape{};
  };
  const std::string v = "vision_tower.", b = v + "encoder.blocks.26.";
  EXPECT_EQ(shape(v + "patch_embed.proj.weight"), (Shape{1152, 3, 14, 14}));
  EXPECT_EQ(shape(v + "patch_embed.proj.bias"), (Shape{1152}));
  EXPECT_EQ(shape(v + "patch_embed.pos_emb.weight"), (Shape{64, 64, 1152}));
  EXPECT_EQ(shape(b + "wqkv.weight"), (Shape{3456, 1152}));
  EXPECT_EQ(shape(b + "wqkv.bias"), (Shape{3456}));
  EXPECT_EQ(shape(b + "wo.weight"), (Shape{1152, 1152}));
  EXPECT_EQ(shape(b + "norm0.weight"), (Shape{1152}));
  EXPECT_EQ(shape(b + "norm1.bias"), (Shape{1152}));
  EXPECT_EQ(shape(b + "mlp.fc0.weight"), (Shape{4304, 1152}));
  EXPECT_EQ(shape(b + "mlp.fc1.weight"), (Shape{1152, 4304}));
  EXPECT_EQ(shape(v + "encoder.final_layernorm.weight"), (Shape{1152}));
  EXPECT_FALSE(by[v + "encoder.final_layernorm.weight"].skip_load);
  EXPECT_EQ(shape("mm_projector.pre_norm.weight"), (Shape{1152}));
  EXPECT_EQ(shape("mm_projector.proj.0.weight"), (Shape{4608, 4608}));
  EXPECT_EQ(shape("mm_projector.proj.2.weight"), (Shape{7168, 4608}));
  EXPECT_EQ(shape("mm_projector.proj.2.bias"), (Shape{7168}));
  EXPECT_EQ(by["mm_projector.proj.0.weight"].component, Component::kProjector);

  // Routed experts INT4: the logical weight (not on disk) and its three stored companions.
  const std::string e = "language_model.model.layers.60.mlp.experts.383.";
  EXPECT_TRUE(is_stored_weight(by[e + "down_proj.weight"], StoredScheme::kInt4Group));
  EXPECT_EQ(by[e + "down_proj.weight"].stored.block_cols, 32);
  EXPECT_EQ(shape(e + "down_proj.weight"), (Shape{7168, 2048}));
  EXPECT_EQ(shape(e + "down_proj.weight_packed"), (Shape{7168, 256}));
  EXPECT_EQ(shape(e + "down_proj.weight_scale"), (Shape{7168, 64}));
  EXPECT_EQ(shape(e + "down_proj.weight_shape"), (Shape{2}));
  EXPECT_EQ(shape(e + "gate_proj.weight_packed"), (Shape{2048, 896}));
  EXPECT_EQ(shape(e + "up_proj.weight_scale"), (Shape{2048, 224}));
  EXPECT_EQ(by[e + "up_proj.weight_scale"].component, Component::kQuantScale);
  // The ignore list keeps attention, shared experts, the dense MLP, the router and lm_head bf16.
  const std::string l = "language_model.model.layers.";
  for (const std::string& n : {l + "3.self_attn.kv_b_proj.weight", l + "3.self_attn.q_a_proj.weight",
                              l + "3.mlp.shared_experts.down_proj.weight", l + "0.mlp.gate_proj.weight",
                              l + "3.mlp.gate.weight", std::string("language_model.lm_head.weight"),
                              std::string("language_model.model.embed_tokens.weight")}) {
    ASSERT_TRUE(by.count(n)) << n;
    EXPECT_FALSE(is_stored_weight(by[n])) << n;
    EXPECT_FALSE(by.count(n.substr(0, n.size() - 7) + ".weight_packed")) << n;
  }
  int64_t packed = 0;
  for (const auto& [n, s] : by) packed += is_stored_weight(s, StoredScheme::kInt4Group);
  EXPECT_EQ(packed, 60 * 384 * 3);

  // inspect: ~1.03T parameters in all (text + tower + projector), ~33B activated per token.
  const ParamReport r = inspect_params(*hp, (*a)->tensor_specs(*hp), cfg, nullptr);
  std::printf("Kimi-K2.5: total %.4g, activated %.4g, vision %.4g, projector %.4g, int4 params %.4g\n",
              static_cast<double>(r.total), static_cast<double>(r.activated), static_cast<double>(r.main.vision),
              static_cast<double>(r.main.projector), static_cast<double>(r.quantized_params));
  EXPECT_EQ(r.quantized_params, int64_t{60} * 384 * 3 * 7168 * 2048);
  // The family-independent analysis counts 1,026,879,374,064 for this config; the adapter adds
  // the tower's final LayerNorm (vision_tower.encoder.final_layernorm, 2 x 1152), which it runs.
  EXPECT_EQ(r.total, 1026879374064 + 2 * 1152);
  EXPECT_EQ(r.main.projector, int64_t{1152} * 2 + 4608 * 4608 + 4608 + 7168 * 4608 + 7168);
  EXPECT_GT(r.total, int64_t{1020} * 1000000000);
  EXPECT_LT(r.total, int64_t{1040} * 1000000000);
  EXPECT_GT(r.activated, int64_t{32} * 1000000000);
  EXPECT_LT(r.activated, int64_t{34} * 1000000000);
}

TEST(KimiK25, RefusesWhatItCannotHonour) {
  auto refuse = [](const std::function<void(nlohmann::json&)>& edit, const std::string& want) {
    auto cfg = published();
    edit(cfg);
    auto hp = (*find_adapter(cfg))->parse_hparams(cfg);
    ASSERT_FALSE(hp.ok()) << want;
    EXPECT_NE(hp.status().message().find(want), std::string::npos) << hp.status().message();
  };
  refuse([](auto& c) { c["vision_config"]["mm_projector_type"] = "mlp"; }, "mm_projector_type");
  refuse([](auto& c) { c["vision_config"]["merge_kernel_size"] = {2, 3}; }, "square");
  refuse([](auto& c) { c["vision_config"].erase("vt_hidden_size"); }, "vt_hidden_size");
  refuse([](auto& c) { c["text_config"]["quantization_config"]["format"] = "int-quantized"; }, "pack-quantized");
  refuse([](auto& c) { c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8; },
         "num_bits");
  refuse([](auto& c) { c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false; },
         "symmetric");
  refuse([](auto& c) { c["text_config"]["quantization_config"]["ignore"].push_back("re:(["); }, "does not compile");
  refuse([](auto& c) { c["media_placeholder_token_id"] = 200000; }, "media_placeholder_token_id");
  refuse([](auto& c) { c["quantization_config"] = c["text_config"]["quantization_config"]; }, "top-level");
}

TEST(PackQuantized, IgnoreListUsesReMatchSemantics) {
  checkpoint::PackQuant q;
  q.ignore = {"lm_head", "re:.*self_attn.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:model\\.layers\\.1\\."};
  EXPECT_FALSE(q.quantizes("lm_head"));
  EXPECT_TRUE(q.quantizes("language_model.lm_head"));  // exact names are exact
  EXPECT_FALSE(q.quantizes("model.layers.3.self_attn.o_proj"));
  EXPECT_FALSE(q.quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(q.quantizes("model.layers.3.mlp.experts.7.down_proj"));
  EXPECT_FALSE(q.quantizes("model.layers.1.mlp.experts.7.down_proj"));  // re.match anchors at the start
  EXPECT_TRUE(q.quantizes("x.model.layers.1.mlp.experts.7.down_proj"));
}

// Words packed by hand as compressed-tensors' pack_to_int32 does: element j at bits 4 (j % 8)
// of word j / 8, stored as q + 8.
TEST(PackQuantized, BitOrderSignAndSlices) {
  const fs::path dir = fs::path(::testing::TempDir()) / "pack-quantized";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int64_t rows = 3, cols = 40;  // 5 words, 2 groups of 32 (the second partial)
  std::vector<int> q(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) q[i] = static_cast<int>((i * 7 + 3) % 16) - 8;
  std::vector<uint32_t> words(rows * 5, 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) words[i * 5 + j / 8] |= static_cast<uint32_t>(q[i * cols + j] + 8) << (4 * (j % 8));
  const float scales[] = {0.5f, 2.0f, 0.25f, 1.0f, 4.0f, 0.125f};  // [3, 2], exact in bf16
  std::vector<uint8_t> wb(words.size() * 4), sb(12), shb(8);
  std::memcpy(wb.data(), words.data(), wb.size());
  for (int k = 0; k < 6; ++k) {
    const uint16_t h = f32_to_bf16(scales[k]);
    std::memcpy(sb.data() + 2 * k, &h, 2);
  }
  const int32_t dims[2] = {rows, cols};
  std::memcpy(shb.data(), dims, 8);
  checkpoint::SafetensorsWriter w;
  w.add("m.weight_packed", DType::kI32, {rows, 5}, std::move(wb));
  w.add("m.weight_scale", DType::kBF16, {rows, 2}, std::move(sb));
  w.add("m.weight_shape", DType::kI32, {2}, std::move(shb));
  ASSERT_TRUE(w.write((dir / "model.safetensors").string()).ok());
  auto cat = checkpoint::Catalog::open(dir.string());
  ASSERT_TRUE(cat.ok()) << cat.status().message();
  checkpoint::PackQuant pq;
  checkpoint::ByteReader reader;
  auto want = [&](int64_t i, int64_t j) { return static_cast<float>(q[i * cols + j]) * scales[i * 2 + j / 32]; };
  checkpoint::WeightRecord rec;
  auto whole = checkpoint::load_pack_quantized_f32(*cat, "m", pq, rows, cols, reader, &rec);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(whole->f32()[i * cols + j], want(i, j)) << i << "," << j;
  EXPECT_EQ(rec.bytes_read, 60u);
  EXPECT_EQ(rec.aux_bytes_read, 12u + 8u);
  // Negative control: the other nibble order would differ.
  EXPECT_NE(static_cast<float>(static_cast<int>(words[0] >> 28) - 8) * 0.5f, want(0, 0));
  auto rows12 = checkpoint::load_pack_quantized_f32(*cat, "m", pq, rows, cols, reader, &rec, 0, 1, 3);
  ASSERT_TRUE(rows12.ok());
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(rows12->f32()[(i - 1) * cols + j], want(i, j));
  EXPECT_EQ(rec.bytes_read, 40u);
  auto mid = checkpoint::load_pack_quantized_f32(*cat, "m", pq, rows, cols, reader, &rec, 1, 12, 36);
  ASSERT_TRUE(mid.ok());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 12; j < 36; ++j) ASSERT_EQ(mid->f32()[i * 24 + (j - 12)], want(i, j));
  EXPECT_EQ(rec.bytes_read, 3u * 4 * 4);  // words 1..4 of each row
  // As stored (the CPU's INT4 kernels): whole, and columns 13..37 (inside a word, at an odd
  // column: the nibbles move down half a byte) in the words covering them, bf16 scales as stored,
  // the same record as the dequantising load's.
  for (const auto& [dim, c0, c1] : {std::tuple{-1, int64_t{0}, cols}, std::tuple{1, int64_t{13}, int64_t{37}}}) {
    checkpoint::WeightRecord kept_rec, f32_rec;
    auto kept = checkpoint::load_pack_quantized_as_stored(*cat, "m", pq, rows, cols, reader, &kept_rec, dim, c0, c1);
    ASSERT_TRUE(kept.ok()) << kept.status().message();
    ASSERT_TRUE(checkpoint::load_pack_quantized_f32(*cat, "m", pq, rows, cols, reader, &f32_rec, dim, c0, c1).ok());
    const int64_t words_covering = (c1 - 1) / 8 + 1 - c0 / 8, groups = (c1 - 1) / 32 + 1 - c0 / 32;
    ASSERT_EQ(kept->values.shape(), (Shape{rows, words_covering * 4}));
    EXPECT_EQ(kept->shape_error(), "");
    ASSERT_EQ(kept->scale.shape(), (Shape{rows, groups}));
    EXPECT_EQ(kept->slice.col0, c0);
    const auto* nib = static_cast<const uint8_t*>(kept->values.data());
    const auto* sc = static_cast<const uint16_t*>(kept->scale.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < c1 - c0; ++p) {
        const int v = ((nib[i * words_covering * 4 + p / 2] >> (4 * (p % 2))) & 15) - 8;
        ASSERT_EQ(static_cast<float>(v) * bf16_to_f32(sc[i * groups + (c0 + p) / 32 - c0 / 32]), want(i, c0 + p))
            << i << "," << c0 + p;
      }
    EXPECT_EQ(kept_rec.bytes_read, f32_rec.bytes_read);
    EXPECT_EQ(kept_rec.checksum, f32_rec.checksum);
    EXPECT_EQ(kept_rec.aux_bytes_read, f32_rec.aux_bytes_read);
  }
  // weight_shape disagreeing with the expected shape is refused by name.
  auto bad = checkpoint::load_pack_quantized_f32(*cat, "m", pq, rows, 48, reader, &rec);
  EXPECT_FALSE(bad.ok());
  // A round trip through pack_quantize reproduces q * scale within half a step.
  std::vector<float> f(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) f[i] = want(i / cols, i % cols);
  const auto packed = checkpoint::pack_quantize(f.data(), rows, cols, pq);
  EXPECT_EQ(packed.packed.size(), static_cast<size_t>(rows * 5));
  EXPECT_EQ(packed.scale_bf16.size(), static_cast<size_t>(rows * 2));
}

}  // namespace
}  // namespace dayzero::model
