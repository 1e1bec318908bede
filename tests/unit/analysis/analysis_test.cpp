// analysis/: every published config analysed; the generic counts equal the adapters' counts
// (config estimate, adapter specs, make-model checkpoints); published index totals reproduced
// byte for byte; published sizes within 2% (total) and 5% (activated); a headers-only
// checkpoint of an architecture with no adapter (DSA indexer on MLA) shows its new blocks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "analysis/analysis.h"
#include "checkpoint/writer.h"
#include "model/inspect.h"
#include "model/model_folder.h"
#include "tools/make_model.h"

namespace dayzero::analysis {
namespace {
namespace fs = std::filesystem;

const std::string kConfigs = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";

nlohmann::json load(const std::string& name) {
  std::ifstream f(kConfigs + name + "/config.json");
  return nlohmann::json::parse(f);
}

void expect_same(const model::ComponentParams& a, const model::ComponentParams& b, const std::string& what) {
  EXPECT_EQ(a.embedding, b.embedding) << what;
  EXPECT_EQ(a.attention, b.attention) << what;
  EXPECT_EQ(a.dense_mlp, b.dense_mlp) << what;
  EXPECT_EQ(a.routed_experts, b.routed_experts) << what;
  EXPECT_EQ(a.shared_experts, b.shared_experts) << what;
  EXPECT_EQ(a.router, b.router) << what;
  EXPECT_EQ(a.norms, b.norms) << what;
  EXPECT_EQ(a.lm_head, b.lm_head) << what;
  EXPECT_EQ(a.mtp_head, b.mtp_head) << what;
  EXPECT_EQ(a.other, b.other) << what;
}

const Finding* feature(const Analysis& a, const std::string& name) {
  for (const auto& f : a.features)
    if (f.name == name) return &f;
  return nullptr;
}

TEST(Analysis, EveryPublishedConfigIsAnalysed) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs)) {
    if (!e.is_directory()) continue;
    auto a = analyze_path(e.path().string());
    ASSERT_TRUE(a.ok()) << e.path() << ": " << a.status().message();
    EXPECT_GT(a->total, 0) << e.path();
    EXPECT_GT(a->activated, 0) << e.path();
    EXPECT_FALSE(a->features.empty()) << e.path();
    EXPECT_EQ(a->unknown_tensors, 0) << e.path();
    ++n;
  }
  EXPECT_GE(n, 14);
}

// A config declaring absurd counts is refused at once instead of building a per-layer list of
// billions of entries (found while fuzzing config.json); the real config is the control.
TEST(Analysis, AbsurdLayerCountsAreRefused) {
  nlohmann::json c = load("Kimi-K2-Instruct");
  ASSERT_TRUE(analyze(c, {}, Source::kConfig).ok());
  c["num_hidden_layers"] = 100000000;
  auto a = analyze(c, {}, Source::kConfig);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("num_hidden_layers (100000000)"), std::string::npos) << a.status().message();
}

// The config estimate and the adapter's specs, classified by name, give the adapter's counts.
TEST(Analysis, KnownFamiliesAgreeWithTheirAdapters) {
  for (const char* name : {"DeepSeek-V3", "Kimi-K2-Instruct", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "Qwen3-30B-A3B-FP8",
                           "Qwen3-0.6B", "Meta-Llama-3.1-405B", "Mixtral-8x22B-v0.1", "WizardLM-2-8x22B"}) {
    const nlohmann::json c = load(name);
    auto m = model::open_model_folder(kConfigs + name + "/config.json", model::WeightsNeeded::kIfPresent);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().message();
    const model::ParamReport r = model::inspect_params(m->hp, m->specs, c);
    auto est = analyze(c, {}, Source::kConfig);
    ASSERT_TRUE(est.ok()) << name;
    EXPECT_EQ(est->adapter, m->hp.family) << name;
    expect_same(est->main, r.main, std::string(name) + " estimate");
    expect_same(est->mtp, r.mtp, std::string(name) + " estimate mtp");
    EXPECT_EQ(est->activated, r.activated) << name;
    // The qwen3_moe adapter declares no FP8 scales; where an adapter does, the counts agree.
    if (r.scale_tensors > 0) {
      EXPECT_EQ(est->scale_tensors, r.scale_tensors) << name;
    }
    std::vector<TensorInfo> ts;
    for (const auto& s : m->specs) ts.push_back({s.name, s.shape, "BF16", 0});
    auto from_specs = analyze(c, ts, Source::kHeaders);
    ASSERT_TRUE(from_specs.ok()) << name;
    expect_same(from_specs->main, r.main, std::string(name) + " specs");
    expect_same(from_specs->mtp, r.mtp, std::string(name) + " specs mtp");
    EXPECT_EQ(from_specs->unknown_tensors, 0) << name;
  }
}

TEST(Analysis, MakeModelCheckpointsAgreeWithTheirAdapters) {
  for (const char* family : {"llama", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3"}) {
    const fs::path dir = fs::temp_directory_path() / ("dayzero-analysis-" + std::string(family) + "-" + std::to_string(getpid()));
    tools::MakeModelOptions o;
    o.family = family;
    o.out_dir = dir.string();
    o.shape = {.n_vocab = 300, .n_embd = 48, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ff = 96};
    o.shape.tie_embeddings = std::string(family) == "qwen2";
    ASSERT_TRUE(tools::make_model(o).ok()) << family;
    auto m = model::open_model_folder(dir.string(), model::WeightsNeeded::kRequired);
    ASSERT_TRUE(m.ok()) << family << ": " << m.status().message();
    const model::ParamReport r = model::inspect_params(m->hp, m->specs, m->config, &m->catalog);
    auto a = analyze_path(dir.string());
    ASSERT_TRUE(a.ok()) << family << ": " << a.status().message();
    EXPECT_EQ(a->source, Source::kHeaders);
    expect_same(a->main, r.main, family);
    expect_same(a->mtp, r.mtp, std::string(family) + " mtp");
    EXPECT_EQ(a->activated, r.activated) << family;
    EXPECT_EQ(a->weight_bytes, r.weight_bytes) << family;
    fs::remove_all(dir);
  }
}

TEST(Analysis, PublishedIndexesGiveTheirTotalSize) {
  auto w = analyze_path(kConfigs + "WizardLM-2-8x22B");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->source, Source::kIndexNames);
  EXPECT_EQ(w->weight_bytes, 281241268224u);
  EXPECT_EQ(w->index_total_size, 281241268224u);
  EXPECT_EQ(w->tensors.size(), 1739u);
  auto l = analyze_path(kConfigs + "llava-1.5-7b-hf");
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->weight_bytes, 14126854144u);
  EXPECT_EQ(l->index_total_size, 14126854144u);
  EXPECT_EQ(l->tensors.size(), 686u);
  EXPECT_EQ(l->adapter, "llava");
  EXPECT_GT(l->parts["vision tower"], 0);
  EXPECT_GT(l->parts["projector"], 0);
  ASSERT_NE(feature(*l, "vision tower"), nullptr);
  EXPECT_EQ(feature(*l, "vision tower")->status, FeatureStatus::kAdapter);
  ASSERT_NE(feature(*l, "projector"), nullptr);
  EXPECT_EQ(feature(*l, "projector")->status, FeatureStatus::kAdapter);
}

// Published totals (billions) and activated counts: SOURCES.md of the fixtures and the model cards.
TEST(Analysis, ConfigEstimatesMatchPublishedSizes) {
  struct Case {
    const char* name;
    double total, activated;
  };
  for (const Case& c : {Case{"DeepSeek-V3", 671e9, 37e9}, Case{"DeepSeek-V3.2", 671e9, 37e9}, Case{"Kimi-K2-Instruct", 1.03e12, 32e9},
                        Case{"Qwen3-235B-A22B", 235e9, 22e9}, Case{"Qwen3-30B-A3B", 30.5e9, 3.3e9},
                        Case{"Mixtral-8x22B-v0.1", 141e9, 39e9}, Case{"Meta-Llama-3.1-405B", 405e9, 405e9},
                        Case{"Qwen3.5-397B-A17B", 397e9, 17e9}}) {
    auto a = analyze(load(c.name), {}, Source::kConfig);
    ASSERT_TRUE(a.ok()) << c.name << ": " << a.status().message();
    EXPECT_LE(std::fabs(a->total - c.total), 0.02 * c.total) << c.name << " total " << a->total;
    EXPECT_LE(std::fabs(a->activated - c.activated), 0.05 * c.activated) << c.name << " activated " << a->activated;
  }
}

TEST(Analysis, UnsupportedArchitecturesNameTheirNewBlocks) {
  // Qwen3.5's text model runs (adapter qwen3_5_moe); its vision tower and M-RoPE are still missing.
  auto q = analyze(load("Qwen3.5-397B-A17B"), {}, Source::kConfig);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->adapter, "qwen3_5_moe");
  EXPECT_GT(q->parts["linear attention"], 0);
  for (const char* f : {"vision tower", "multimodal RoPE (M-RoPE)"}) {
    ASSERT_NE(feature(*q, f), nullptr) << f;
    EXPECT_EQ(feature(*q, f)->status, FeatureStatus::kNewBlock) << f;
  }
  for (const char* f : {"linear attention (Gated DeltaNet)", "gated shared expert", "attention output gate", "partial rotary"}) {
    ASSERT_NE(feature(*q, f), nullptr) << f;
    EXPECT_EQ(feature(*q, f)->status, FeatureStatus::kAdapter) << f;
  }
  // Without an adapter (model_type renamed) the same features are supported by their blocks.
  nlohmann::json renamed = load("Qwen3.5-397B-A17B");
  renamed["model_type"] = "qwen3_5_moe_unknown";
  renamed["architectures"] = {"Unknown"};
  auto g = analyze(renamed, {}, Source::kConfig);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(g->adapter.empty());
  for (const char* f : {"linear attention (Gated DeltaNet)", "gated shared expert", "attention output gate", "partial rotary"}) {
    ASSERT_NE(feature(*g, f), nullptr) << f;
    EXPECT_EQ(feature(*g, f)->status, FeatureStatus::kBlock) << f;
  }
  auto k = analyze(load("Kimi-K2.5"), {}, Source::kConfig);
  ASSERT_TRUE(k.ok()) << k.status().message();
  // Kimi-K2.5's INT4 pack-quantized experts: the kimi_k25 adapter reads them.
  ASSERT_NE(feature(*k, "quantized weights"), nullptr);
  EXPECT_EQ(feature(*k, "quantized weights")->status, FeatureStatus::kAdapter);
  EXPECT_GT(k->parts["vision tower"], 0);
}

// A headers-only checkpoint (zero data) of DSA on MLA, with one tensor no rule knows.
TEST(Analysis, HeadersOnlyCheckpointOfAnArchitectureWithoutAdapter) {
  const fs::path dir = fs::temp_directory_path() / ("dayzero-analysis-dsa-" + std::to_string(getpid()));
  fs::create_directories(dir);
  // A family no adapter claims (deepseek_v32 and glm_moe_dsa, the same layout, have adapters).
  nlohmann::json c = {{"model_type", "sparse_mla_preview"}, {"architectures", {"SparseMlaPreviewForCausalLM"}},
                      {"vocab_size", 256}, {"hidden_size", 64}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 4}, {"intermediate_size", 128}, {"moe_intermediate_size", 32},
                      {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"n_shared_experts", 1},
                      {"first_k_dense_replace", 1}, {"q_lora_rank", 48}, {"kv_lora_rank", 32}, {"qk_nope_head_dim", 16},
                      {"qk_rope_head_dim", 8}, {"v_head_dim", 16}, {"index_topk", 16}, {"index_n_heads", 2},
                      {"index_head_dim", 16}, {"scoring_func", "sigmoid"}, {"torch_dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << c.dump();
  auto d = read_dims(c);
  ASSERT_TRUE(d.ok()) << d.status().message();
  checkpoint::SafetensorsWriter w;
  int64_t params = 0;
  for (const auto& t : synthesize_tensors(*d)) {
    params += shape_numel(t.shape);
    w.add(t.name, DType::kBF16, t.shape, std::vector<uint8_t>(shape_numel(t.shape) * 2));
  }
  w.add("model.layers.0.self_attn.mystery.weight", DType::kBF16, {4, 4}, std::vector<uint8_t>(32));
  ASSERT_TRUE(w.write((dir / "model.safetensors").string()).ok());
  auto a = analyze_path(dir.string());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->source, Source::kHeaders);
  EXPECT_TRUE(a->adapter.empty());
  EXPECT_EQ(a->total, params + 16);
  EXPECT_GT(a->parts["sparse-attention indexer"], 0);
  EXPECT_GT(a->parts["MLA projections"], 0);
  EXPECT_EQ(a->n_moe_layers, 2);
  const Finding* dsa = feature(*a, "sparse attention indexer (DSA)");
  ASSERT_NE(dsa, nullptr);
  EXPECT_EQ(dsa->status, FeatureStatus::kNewBlock);
  EXPECT_NE(dsa->evidence.find("model.layers.{L}.self_attn.indexer.*"), std::string::npos) << dsa->evidence;
  ASSERT_NE(feature(*a, "MLA"), nullptr);
  EXPECT_EQ(feature(*a, "MLA")->status, FeatureStatus::kBlock);
  const Finding* unknown = feature(*a, "unknown tensors");
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->evidence, "model.layers.{L}.self_attn.mystery.weight");
  EXPECT_EQ(a->unknown_bytes, 32u);
  fs::remove_all(dir);
}

// DeepSeek-V3.2 and GLM-5 as published: their adapters run the indexer (blocks/dsa_indexer).
TEST(Analysis, SparseAttentionIsSupportedWhereAnAdapterRunsIt) {
  for (const char* name : {"DeepSeek-V3.2", "GLM-5"}) {
    auto a = analyze(load(name), {}, Source::kConfig);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().message();
    EXPECT_FALSE(a->adapter.empty()) << name;
    const Finding* dsa = feature(*a, "sparse attention indexer (DSA)");
    ASSERT_NE(dsa, nullptr) << name;
    EXPECT_EQ(dsa->status, FeatureStatus::kAdapter) << name;
    EXPECT_EQ(dsa->block, a->adapter) << name;
    for (const auto& f : a->features) EXPECT_NE(f.status, FeatureStatus::kNewBlock) << name << ": " << f.name;
  }
}

// GLM-5's indexer types as transformers derives them (index_topk_freq 4, offset 2: 21 full
// layers, 57 shared) leave the shared layers without indexer tensors: 57 x (32 x 128 x 2048 wq_b
// + 128 x 6144 wk + 2 x 128 k_norm + 32 x 6144 weights_proj) = 57 x 9,371,904 fewer parameters.
TEST(Analysis, SharedIndexerLayersHaveNoIndexerTensors) {
  nlohmann::json c = load("GLM-5");
  auto full = analyze(c, {}, Source::kConfig);
  c["index_topk_freq"] = 4;
  auto shared = analyze(c, {}, Source::kConfig);
  ASSERT_TRUE(full.ok() && shared.ok());
  EXPECT_EQ(full->total - shared->total, int64_t{57} * 9371904);
}

TEST(Analysis, WrongTypeNamesTheKey) {
  nlohmann::json c = load("GLM-5");
  c["n_routed_experts"] = "many";
  auto a = analyze(c, {}, Source::kConfig);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("n_routed_experts"), std::string::npos) << a.status().message();
  EXPECT_EQ(a.status().exit_code(), 2);
}

}  // namespace
}  // namespace dayzero::analysis
