// deepseek_v4 (DeepSeek-V4) from the V4-Flash and V4-Pro configs: the hyper-parameters as
// transformers 5.25 derives them, the tensors in the published checkpoint's names and shapes
// (FP8 .scale companions, tid2eid, MTP declared and skipped), the totals against the published
// 284B / 1.6T, the layer descriptors and the KV bytes at 1M context per layer kind that the
// memory model counts, and the config keys refused with one sentence. Not the forward pass
// (the adapter refuses to run: forward_support).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "model/inspect.h"
#include "model/registry.h"
#include "plan/memory.h"

namespace dayzero::model {
namespace {

nlohmann::json load(const char* name) {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/" + name + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

const Adapter& adapter() { return **find_adapter_by_family("deepseek_v4"); }

Result<HParams> parse(const nlohmann::json& c) {
  auto a = find_adapter(c);
  if (!a.ok()) return a.status();
  return (*a)->parse_hparams(c);
}

std::map<std::string, TensorSpec> by_name(const std::vector<TensorSpec>& specs) {
  std::map<std::string, TensorSpec> m;
  for (const auto& s : specs) m[s.name] = s;
  return m;
}

// V4-Flash as transformers' DeepseekV4Config() writes it: 43 layers (2 HCA, then HCA / CSA
// alternating: 23 HCA, 20 CSA), 3 hash-routed layers, rotary on 64 of 512 channels.
TEST(DeepseekV4, FlashConfigParses) {
  const nlohmann::json c = load("DeepSeek-V4-Flash");
  auto a = find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_STREQ((*a)->family(), "deepseek_v4");
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const DeepseekV4Params& v = hp->deepseek_v4();
  EXPECT_EQ(v.hc_mult, 4);
  EXPECT_EQ(v.hc_sinkhorn_iters, 20);
  EXPECT_EQ(v.rope_dim, 64);
  EXPECT_EQ(hp->rope_theta, 10000.0);
  EXPECT_EQ(v.compress_rope_theta, 160000.0);
  EXPECT_EQ(hp->rope_scaling.type, "default");
  EXPECT_EQ(v.csa_rate, 4);
  EXPECT_EQ(v.hca_rate, 128);
  EXPECT_EQ(v.o_groups, 8);
  EXPECT_EQ(v.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(v.routed_scaling_factor, 1.5);
  EXPECT_EQ(hp->n_nextn_layer, 1);
  int csa = 0, hca = 0;
  for (V4Attention t : v.layer_types) (t == V4Attention::kCompressedSparse ? csa : hca)++;
  EXPECT_EQ(csa, 20);
  EXPECT_EQ(hca, 23);
  EXPECT_EQ(v.layer_types[0], V4Attention::kHeavilyCompressed);
  EXPECT_EQ(v.layer_types[3], V4Attention::kCompressedSparse);
  for (int l = 0; l < 43; ++l) EXPECT_EQ(v.hash_moe[l], l < 3) << l;
}

// The published checkpoint's names (transformers' conversion_mapping.py maps them to modules).
TEST(DeepseekV4, PublishedTensorNames) {
  const nlohmann::json c = load("DeepSeek-V4-Flash");
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok());
  const auto s = by_name(adapter().tensor_specs(*hp));
  const auto shape = [&](const std::string& n) {
    const auto it = s.find(n);
    EXPECT_NE(it, s.end()) << n;
    return it == s.end() ? Shape{} : it->second.shape;
  };
  EXPECT_EQ(shape("embed.weight"), (Shape{129280, 4096}));
  EXPECT_EQ(shape("head.weight"), (Shape{129280, 4096}));
  EXPECT_EQ(shape("hc_head_fn"), (Shape{4, 16384}));
  EXPECT_EQ(shape("layers.0.hc_attn_fn"), (Shape{24, 16384}));
  EXPECT_EQ(shape("layers.0.hc_ffn_scale"), (Shape{3}));
  EXPECT_EQ(shape("layers.0.attn.attn_sink"), (Shape{64}));
  EXPECT_EQ(shape("layers.0.attn.wq_b.weight"), (Shape{64 * 512, 1024}));
  EXPECT_EQ(shape("layers.0.attn.wo_a.weight"), (Shape{8 * 1024, 64 * 512 / 8}));
  EXPECT_EQ(shape("layers.0.attn.wo_b.weight"), (Shape{4096, 8 * 1024}));
  EXPECT_EQ(shape("layers.0.attn.compressor.ape"), (Shape{128, 512}));          // HCA: one series
  EXPECT_EQ(shape("layers.3.attn.compressor.wkv.weight"), (Shape{1024, 4096}));  // CSA: Ca | Cb
  EXPECT_EQ(shape("layers.3.attn.indexer.compressor.ape"), (Shape{4, 256}));
  EXPECT_EQ(shape("layers.3.attn.indexer.wq_b.weight"), (Shape{64 * 128, 1024}));
  EXPECT_EQ(shape("layers.0.ffn.gate.tid2eid"), (Shape{129280, 6}));
  EXPECT_EQ(s.count("layers.0.ffn.gate.bias"), 0u);  // hash layers have no selection bias
  EXPECT_EQ(shape("layers.3.ffn.gate.bias"), (Shape{256}));
  EXPECT_EQ(shape("layers.3.ffn.experts.255.w2.weight"), (Shape{4096, 2048}));
  EXPECT_EQ(shape("layers.3.ffn.shared_experts.w1.weight"), (Shape{2048, 4096}));
  EXPECT_EQ(s.count("layers.0.attn.indexer.wq_b.weight"), 0u);  // HCA has no indexer
  ASSERT_EQ(s.count("mtp.0.e_proj.weight"), 1u);
  EXPECT_TRUE(s.at("mtp.0.e_proj.weight").skip_load);
  EXPECT_TRUE(s.at("mtp.0.ffn.experts.0.w1.weight").skip_load);
  EXPECT_FALSE(s.at("layers.42.ffn.experts.0.w1.weight").skip_load);
  EXPECT_EQ(s.count("layers.0.attn.wq_a.scale"), 0u);  // unquantized config
  // tid2eid is an integer table of expert ids: stored I32 (or I64), never a float.
  const TensorSpec& table = s.at("layers.0.ffn.gate.tid2eid");
  EXPECT_EQ(table.index_range, 256);
  EXPECT_TRUE(stored_dtype_fits(table, DType::kI32));
  EXPECT_FALSE(stored_dtype_fits(table, DType::kBF16));
  EXPECT_TRUE(stored_dtype_fits(s.at("layers.0.attn.wkv.weight"), DType::kBF16));
  EXPECT_FALSE(stored_dtype_fits(s.at("layers.0.attn.wkv.weight"), DType::kI32));
}

// FP8 as published: X.weight with its X.scale over 128 x 128 blocks; compressors, indexer
// weights_proj, router and head stay unquantized. FP4 experts are refused by name.
TEST(DeepseekV4, Fp8ScalesAndFp4Refusal) {
  nlohmann::json c = load("DeepSeek-V4-Flash");
  c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}},
                              {"activation_scheme", "dynamic"}, {"scale_fmt", "ue8m0"}};
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const auto s = by_name(adapter().tensor_specs(*hp));
  ASSERT_EQ(s.count("layers.0.attn.wq_a.scale"), 1u);
  EXPECT_EQ(s.at("layers.0.attn.wq_a.scale").shape, (Shape{8, 32}));
  EXPECT_EQ(s.at("layers.0.attn.wq_a.weight").stored.scale, "layers.0.attn.wq_a.scale");
  EXPECT_EQ(s.at("layers.3.ffn.experts.7.w2.scale").shape, (Shape{32, 16}));
  EXPECT_EQ(s.at("layers.3.attn.compressor.wkv.weight").stored.scale, "");
  EXPECT_EQ(s.at("layers.3.attn.indexer.weights_proj.weight").stored.scale, "");
  EXPECT_EQ(s.at("head.weight").stored.scale, "");
  nlohmann::json f32_scales = c;
  f32_scales["quantization_config"].erase("scale_fmt");
  auto no_fmt = parse(f32_scales);
  ASSERT_FALSE(no_fmt.ok());
  EXPECT_NE(no_fmt.status().message().find("scale_fmt"), std::string::npos) << no_fmt.status().message();
  // The release's MXFP4 experts: codes in place under .weight, UE8M0 scales per 32 in .scale; the
  // shared expert and attention stay FP8. Another expert dtype is refused by name.
  c["quantization_config"]["expert_dtype"] = "fp4";
  auto fp4 = parse(c);
  ASSERT_TRUE(fp4.ok()) << fp4.status().message();
  const auto s4 = by_name(adapter().tensor_specs(*fp4));
  const TensorSpec& w2 = s4.at("layers.3.ffn.experts.7.w2.weight");
  EXPECT_TRUE(is_stored_weight(w2, StoredScheme::kMxfp4));
  EXPECT_EQ(w2.stored.placement, StoredPlacement::kOwnName);
  EXPECT_EQ(w2.stored.scale, "layers.3.ffn.experts.7.w2.scale");
  EXPECT_EQ(s4.at("layers.3.ffn.experts.7.w2.scale").shape, (Shape{4096, 64}));  // [d, ff / 32]
  EXPECT_EQ(s4.at("layers.3.ffn.shared_experts.w2.weight").stored.scale, "layers.3.ffn.shared_experts.w2.scale");
  EXPECT_TRUE(is_stored_weight(s4.at("layers.3.ffn.shared_experts.w2.weight"), StoredScheme::kFp8Block));
  c["quantization_config"]["expert_dtype"] = "fp6";
  auto fp6 = parse(c);
  ASSERT_FALSE(fp6.ok());
  EXPECT_EQ(fp6.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(fp6.status().message().find("expert_dtype 'fp6'"), std::string::npos) << fp6.status().message();
}

// Totals from the specs (MTP apart, as the published figures count) against DeepSeek's 284B
// (V4-Flash) and 1.6T (V4-Pro), activated per token (without the input embedding) against 13B /
// 49B. Measured: Flash 284,328,206,295 (+0.12 %), activated 13.27B (+2.1 %); Pro
// 1,572,975,537,379 (-1.7 %: "1.6T" is rounded to two digits, the count lies inside its
// rounding interval), activated 48.83B (-0.3 %); MTP 6.61B and 25.84B apart.
TEST(DeepseekV4, TotalsMatchThePublishedSizes) {
  struct Case {
    const char* name;
    double total_lo, total_hi, activated;
  };
  for (const Case& k : {Case{"DeepSeek-V4-Flash", 284e9 * 0.99, 284e9 * 1.01, 13e9},
                        Case{"DeepSeek-V4-Pro", 1.55e12, 1.65e12, 49e9}}) {
    const nlohmann::json c = load(k.name);
    auto hp = parse(c);
    ASSERT_TRUE(hp.ok()) << k.name << ": " << hp.status().message();
    const ParamReport r = inspect_params(*hp, adapter().tensor_specs(*hp), c, nullptr);
    const auto total = static_cast<double>(r.total);
    EXPECT_GE(total, k.total_lo) << k.name << " total " << r.total;
    EXPECT_LT(total, k.total_hi) << k.name << " total " << r.total;
    EXPECT_NEAR(static_cast<double>(r.activated_no_embedding) / k.activated, 1.0, 0.025)
        << k.name << " activated " << r.activated_no_embedding;
    EXPECT_GT(r.mtp_total, 0) << k.name;
  }
}

// Per layer kind: the window of shared K=V entries (head_dim, not 2 x head_dim), one compressed
// entry per compress_rate tokens (plus an indexer key in CSA), the compressors' tails per
// sequence. The memory model's bytes at a 1M context follow from them.
TEST(DeepseekV4, LayerDescriptorsAndKvBytesAtOneMillion) {
  const nlohmann::json c = load("DeepSeek-V4-Flash");
  auto hp = parse(c);
  ASSERT_TRUE(hp.ok());
  const auto layers = describe_layers(adapter(), *hp, adapter().tensor_specs(*hp));
  ASSERT_EQ(layers.size(), 43u);
  const LayerCache& hca = layers[0].cache;
  const LayerCache& csa = layers[3].cache;
  EXPECT_EQ(layers[0].mixer, MixerKind::kHeavilyCompressed);
  EXPECT_EQ(layers[3].mixer, MixerKind::kCompressedSparse);
  EXPECT_EQ(hca.kv_heads, 1);
  EXPECT_TRUE(hca.kv_shared);
  EXPECT_EQ(hca.kv_per_head(), 512);
  EXPECT_EQ(hca.window, 128);
  EXPECT_EQ(hca.compress_rate, 128);
  EXPECT_EQ(hca.compressed_index_dim, 0);
  EXPECT_EQ(csa.compress_rate, 4);
  EXPECT_EQ(csa.compressed_kv_dim, 512);
  EXPECT_EQ(csa.compressed_index_dim, 128);
  EXPECT_EQ(layers[3].ffn.n_expert, 256);
  EXPECT_EQ(layers[3].ffn.shared_ff, 2048);
  plan::MemoryParams p;
  p.bytes_per_activation = 2;
  p.max_context_tokens = int64_t{1} << 20;
  // bf16: 128 window entries of 512, plus 2^20 / rate entries of 512 (+ 128 indexer).
  EXPECT_EQ(plan::layer_kv_bytes(csa, 1, p), 2 * (128 * 512 + (int64_t{1} << 18) * 640));
  EXPECT_EQ(plan::layer_kv_bytes(hca, 1, p), 2 * (128 * 512 + (int64_t{1} << 13) * 512));
  EXPECT_EQ(plan::layer_kv_bytes(csa, 8, p), plan::layer_kv_bytes(csa, 1, p));  // the one head is whole on every rank
  // The tails: 3 pending tokens' kv and gate of both series plus the overlap, at 512 and 128.
  EXPECT_EQ(csa.pending_elements, 3 * 2 * 2 * 512 + 2 * 512 + 3 * 2 * 2 * 128 + 2 * 128);
  EXPECT_EQ(plan::layer_state_bytes(csa, 1, p), 2 * csa.pending_elements);
}

TEST(DeepseekV4, BadKeysAreRefusedByName) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  nlohmann::json bad_types = load("DeepSeek-V4-Flash")["layer_types"];
  bad_types[1] = "full_attention";
  nlohmann::json bad_mlp = load("DeepSeek-V4-Flash")["mlp_layer_types"];
  bad_mlp[5] = "dense";
  for (const Case& k : {Case{"layer_types", bad_types, "layer_types[1] \"full_attention\""},
                        Case{"mlp_layer_types", bad_mlp, "mlp_layer_types[5] \"dense\""},
                        Case{"hc_mult", 0, "'hc_mult' must be at least 1"},
                        Case{"hc_sinkhorn_iters", 0, "'hc_sinkhorn_iters'"},
                        Case{"num_key_value_heads", 8, "num_key_value_heads must be 1"},
                        Case{"scoring_func", "sigmoid_v2", "scoring_func 'sigmoid_v2'"},
                        Case{"o_groups", 7, "o_groups 7"},
                        Case{"norm_topk_prob", false, "norm_topk_prob=false"},
                        Case{"compress_rates", {{"sliding_attention", 2}}, "compress_rates key 'sliding_attention'"}}) {
    nlohmann::json c = load("DeepSeek-V4-Flash");
    c[k.key] = k.value;
    auto hp = parse(c);
    ASSERT_FALSE(hp.ok()) << k.key;
    EXPECT_NE(hp.status().message().find(k.expect), std::string::npos) << k.key << ": " << hp.status().message();
  }
  // The control: the unchanged config parses.
  EXPECT_TRUE(parse(load("DeepSeek-V4-Flash")).ok());
}

// The unquantized model and the published FP8 weights with UE8M0 scales both run.
TEST(DeepseekV4, UnquantizedAndUe8m0Fp8Run) {
  auto hp = parse(load("DeepSeek-V4-Flash"));
  ASSERT_TRUE(hp.ok());
  EXPECT_TRUE(adapter().forward_support(*hp).ok());
  EXPECT_FALSE(hp->quant_scale_ue8m0);
  nlohmann::json q = load("DeepSeek-V4-Flash");
  q["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  auto qhp = parse(q);
  ASSERT_TRUE(qhp.ok()) << qhp.status().message();
  EXPECT_TRUE(adapter().forward_support(*qhp).ok());
  EXPECT_TRUE(qhp->quant_scale_ue8m0);
  EXPECT_EQ(qhp->quant_block_rows, 128);
  // Every other family runs.
  auto v3 = find_adapter_by_family("deepseek_v3");
  ASSERT_TRUE(v3.ok());
  auto v3hp = (*v3)->parse_hparams(load("DeepSeek-V3"));
  ASSERT_TRUE(v3hp.ok());
  EXPECT_TRUE((*v3)->forward_support(*v3hp).ok());
}

}  // namespace
}  // namespace dayzero::model
