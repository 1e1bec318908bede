// Plans of models without an adapter, from the generic analysis (plan/generic_request.h): the
// published configs of GLM-5, DeepSeek-V3.2, Kimi-K2.5 and Qwen3.5-397B-A17B (config only) and
// a headers-only checkpoint of a hybrid stack (linear, sliding-window and full attention by
// layer_types), with their KV bytes per token and state bytes per sequence held to hand counts
// and their caveats; and, for every fixture with an adapter, the generic request's per-layer
// weight bytes and KV bytes per token against the adapter's.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/analysis.h"
#include "model/model_folder.h"
#include "plan/generic_request.h"
#include "plan/plan_request.h"
#include "plan/planner.h"
#include "plan/report.h"

namespace dayzero::plan {
namespace {
namespace fs = std::filesystem;

const std::string kConfigs = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";

analysis::Analysis analysed(const std::string& name) {
  auto a = analysis::analyze_path(kConfigs + name + "/config.json");
  EXPECT_TRUE(a.ok()) << name << ": " << a.status().message();
  return a.ok() ? std::move(a).value() : analysis::Analysis{};
}

// A fixture's config.json with model_type and architectures renamed to a family no adapter
// claims (GLM-5 has an adapter now; its layout stays the no-adapter case of DSA on MLA).
analysis::Analysis analysed_without_adapter(const std::string& name) {
  std::ifstream f(kConfigs + name + "/config.json");
  nlohmann::json c = nlohmann::json::parse(f);
  c["model_type"] = "sparse_mla_preview";
  c["architectures"] = {"SparseMlaPreviewForCausalLM"};
  const fs::path dir = fs::temp_directory_path() / ("dz_generic_plan_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << c.dump();
  auto a = analysis::analyze_path((dir / "config.json").string());
  fs::remove_all(dir);
  EXPECT_TRUE(a.ok()) << name << ": " << a.status().message();
  return a.ok() ? std::move(a).value() : analysis::Analysis{};
}

RequestInputs inputs(int nodes, int64_t context, int batch, WeightsOnDevice w = WeightsOnDevice::kAsStored) {
  RequestInputs in;
  in.topo.nodes = nodes;
  in.topo.gpus_per_node = 8;
  in.topo.device_memory_bytes = int64_t{141} << 30;
  in.context_tokens = context;
  in.batch = batch;
  in.weights = w;
  return in;
}

bool has_caveat(const Plan& p, const std::string& figure, const std::string& text) {
  for (const auto& c : p.caveats)
    if (c.figure == figure && c.text.find(text) != std::string::npos) return true;
  return false;
}

struct FixtureCase {
  const char* name;
  int64_t kv_bytes_per_token;  // bf16, tp = 1, one sequence, the whole model
  int64_t state_bytes_per_sequence;
};

// Hand counts (bf16 KV 2 B; recurrent state f32 4 B); DeepSeek-V3.2, Kimi-K2.5 and GLM-5 have
// adapters now (their caches are the adapters' layer descriptors), so the first two
// are not among these and GLM-5 comes renamed to a family without one (analysed_without_adapter):
//   GLM-5: 78 MLA layers x (kv_lora 512 + rope 64 + DSA indexer key 128) x 2 B = 109,824.
//   Qwen3.5-397B-A17B: 15 full-attention layers x 2 kv heads x (k 256 + v 256) x 2 = 30,720;
//   45 linear-attention layers x [(4 - 1) x (2 x 16 x 128 + 64 x 128) conv x 2 B
//   + 64 x 128 x 128 recurrent x 4 B] = 45 x (73,728 + 4,194,304) = 192,061,440.
TEST(GenericPlan, PublishedConfigsPlanWithHandCountedCaches) {
  const FixtureCase cases[] = {{"GLM-5", 109824, 0}, {"Qwen3.5-397B-A17B", 30720, 192061440}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const analysis::Analysis a = std::string(c.name) == "GLM-5" ? analysed_without_adapter(c.name) : analysed(c.name);
    // Qwen3.5 has an adapter (qwen3_5_moe) whose cache rule gives the same figures
    // (inspect_cli_test); its generic request is still what a family without one gets.
    ASSERT_TRUE(a.adapter.empty() || a.adapter == "qwen3_5_moe") << a.adapter;
    auto req = make_generic_plan_request(a, inputs(16, 4096, 1));
    ASSERT_TRUE(req.ok()) << req.status().message();
    const CacheSummary s = summarize_cache(req->layer_descs, 2);
    EXPECT_EQ(s.kv_bytes_per_token, c.kv_bytes_per_token);
    EXPECT_EQ(s.state_bytes_per_sequence, c.state_bytes_per_sequence);
    std::vector<Candidate> cands;
    auto p = choose_plan(*req, &cands);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_TRUE(has_caveat(*p, "weights", "estimate from config.json"));
    EXPECT_TRUE(has_caveat(*p, "weights", "features dayzero has no block for"));
    // The KV term of every rank is its stage's layers at the rank's share (rank_memory recounts it).
    for (int r = 0; r < p->pp * p->tp; ++r) {
      const Stage& st = p->stage_of(r);
      const StageCache sc = stage_cache(st.layer_begin, st.layer_end, p->tp, req->memory_params());
      EXPECT_EQ(p->memory[r].kv_cache, sc.kv) << "rank " << r;
      EXPECT_EQ(p->memory[r].state, sc.state) << "rank " << r;
    }
    const std::string html = render_html_report(*p, req->topo, ReportOptions{c.name, {}, cands});
    EXPECT_NE(html.find("estimate from config.json"), std::string::npos);
    const nlohmann::json j = to_json(*p);
    ASSERT_TRUE(j.contains("caveats"));
    auto back = plan_from_json(j);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->caveats, p->caveats);
    EXPECT_EQ(back->memory, p->memory);
  }
  // MLA plans say what dayzero's own MLA cache would hold; DSA says the indexer key.
  auto glm = choose_plan(*make_generic_plan_request(analysed_without_adapter("GLM-5"), inputs(16, 4096, 1)));
  ASSERT_TRUE(glm.ok());
  EXPECT_TRUE(has_caveat(*glm, "kv_cache", "dayzero's own MLA block caches the expanded k and v instead: 2 x 64 heads x 256 = 32768"));
  EXPECT_TRUE(has_caveat(*glm, "kv_cache", "indexer's key, index_head_dim 128"));
  auto qwen = choose_plan(*make_generic_plan_request(analysed("Qwen3.5-397B-A17B"), inputs(16, 4096, 1)));
  ASSERT_TRUE(qwen.ok());
  EXPECT_TRUE(has_caveat(*qwen, "state", "Gated DeltaNet"));
  EXPECT_TRUE(has_caveat(*qwen, "kv_cache", "no KV cache in the 45 linear-attention layers"));
}

// The 262,144-token context of Qwen3.5-397B-A17B at tp = 1: 15 KV layers, 45 fixed states.
TEST(GenericPlan, LongContextOfAHybridStack) {
  auto req = make_generic_plan_request(analysed("Qwen3.5-397B-A17B"), inputs(16, 262144, 1));
  ASSERT_TRUE(req.ok()) << req.status().message();
  const StageCache all = stage_cache(0, 60, 1, req->memory_params());
  EXPECT_EQ(all.kv, int64_t{30720} * 262144);   // 8,053,063,680 B
  EXPECT_EQ(all.state, 192061440);              // independent of the context
  // Were every layer a full-attention layer: 60 x 2048 B per token.
  EXPECT_EQ(int64_t{60} * 2048 * 262144, 32212254720);
  // tp = 8: the 2 kv heads are replicated (1 per rank); the 16 state blocks split 2 per rank.
  const StageCache t8 = stage_cache(0, 60, 8, req->memory_params());
  EXPECT_EQ(t8.kv, int64_t{15} * 1024 * 262144);
  EXPECT_EQ(t8.state, 45 * 2 * (2304 * 2 + 65536 * 4));
}

// A safetensors file whose header is real and whose data is a hole (ftruncate); each tensor
// at its dtype (I32 or, when empty or anything else, BF16).
void write_headers_only(const fs::path& file, const std::vector<analysis::TensorInfo>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    const bool i32 = t.dtype == "I32", u8 = t.dtype == "U8";
    const uint64_t n = static_cast<uint64_t>(shape_numel(t.shape)) * (i32 ? 4 : u8 ? 1 : 2);
    h[t.name] = {{"dtype", i32 ? "I32" : u8 ? "U8" : "BF16"}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << text;
  f.close();
  ASSERT_EQ(truncate(file.c_str(), static_cast<off_t>(8 + len + off)), 0);
}

// 4 layers: linear, sliding (window 64), full, linear attention; GQA 4 q / 2 kv heads of 16;
// linear attention 2 k / 4 v heads of 8, conv kernel 4.
nlohmann::json hybrid_config() {
  return {{"model_type", "hybrid_test"}, {"architectures", {"HybridTestForCausalLM"}}, {"vocab_size", 256},
          {"hidden_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 16}, {"intermediate_size", 128}, {"sliding_window", 64},
          {"layer_types", {"linear_attention", "sliding_attention", "full_attention", "linear_attention"}},
          {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 8},
          {"linear_value_head_dim", 8}, {"linear_conv_kernel_dim", 4}, {"torch_dtype", "bfloat16"}};
}

TEST(GenericPlan, HeadersOnlyHybridCheckpoint) {
  const fs::path dir = fs::temp_directory_path() / ("dayzero-generic-plan-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const nlohmann::json config = hybrid_config();
  std::ofstream(dir / "config.json") << config.dump();
  auto dims = analysis::read_dims(config);
  ASSERT_TRUE(dims.ok()) << dims.status().message();
  write_headers_only(dir / "model.safetensors", analysis::synthesize_tensors(*dims));
  auto a = analysis::analyze_path(dir.string());
  fs::remove_all(dir);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->source, analysis::Source::kHeaders);

  RequestInputs in = inputs(1, 1000, 2);
  in.topo.gpus_per_node = 2;
  in.dp = 1;
  in.pp = 1;
  in.tp = 1;
  in.world_size = 1;
  auto req = make_generic_plan_request(*a, in);
  ASSERT_TRUE(req.ok()) << req.status().message();
  auto p = choose_plan(*req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  // Hand counts, context 1000, batch 2, bf16:
  //   full layer: 2 kv heads x (16 + 16) x 1000 tokens x 2 seq x 2 B          = 256,000
  //   sliding layer: the same for min(1000, 64) = 64 tokens                   =  16,384
  //   linear layers (2 of them): gcd(2, 4) = 2 blocks, each with a conv window
  //   3 x (2 x 16 + 32) / 2 = 96 elements at 2 B and 4 / 2 x 8 x 8 = 128 f32:
  //   2 seq x 2 blocks x (192 + 512) = 2,816 each
  EXPECT_EQ(p->memory[0].kv_cache, 256000 + 16384);
  EXPECT_EQ(p->memory[0].state, 2 * 2816);
  // The headers' bytes, every tensor held once at tp = 1.
  EXPECT_EQ(p->memory[0].weights, static_cast<int64_t>(a->weight_bytes));
  EXPECT_FALSE(has_caveat(*p, "weights", "estimate"));
  EXPECT_TRUE(has_caveat(*p, "kv_cache", "sliding window 64 bounds the cache of 1 of 4 layers"));
  EXPECT_TRUE(has_caveat(*p, "state", "linear attention"));

  // tp = 2: one kv head and one state block per rank.
  in.tp = 2;
  in.world_size = 2;
  auto req2 = make_generic_plan_request(*a, in);
  ASSERT_TRUE(req2.ok());
  auto p2 = choose_plan(*req2);
  ASSERT_TRUE(p2.ok()) << p2.status().message();
  EXPECT_EQ(p2->memory[0].kv_cache, (256000 + 16384) / 2);
  EXPECT_EQ(p2->memory[0].state, 2816);
  EXPECT_LT(p2->memory[0].weights, p->memory[0].weights);

  // Negative control: a wrong kv head count changes the KV bytes, and this count sees it.
  analysis::Analysis wrong = *a;
  wrong.dims.text.n_head_kv = 4;
  in.tp = 1;
  in.world_size = 1;
  auto req3 = make_generic_plan_request(wrong, in);
  ASSERT_TRUE(req3.ok());
  auto p3 = choose_plan(*req3);
  ASSERT_TRUE(p3.ok());
  EXPECT_NE(p3->memory[0].kv_cache, 256000 + 16384);
  EXPECT_EQ(p3->memory[0].kv_cache, 2 * (256000 + 16384));
}

// Per layer and tp rank, the bytes held under (tp, ep, etp), MTP layers excluded.
std::vector<std::vector<int64_t>> layer_bytes(const PlanRequest& r, int tp, int ep, int etp) {
  const MemoryParams mp = r.memory_params();
  std::vector<std::vector<int64_t>> out(r.hp.n_layer + 1, std::vector<int64_t>(tp, 0));
  for (size_t i = 0; i < r.specs.size(); ++i) {
    const auto& s = r.specs[i];
    if (s.skip_load || s.layer >= r.hp.n_layer) continue;
    for (int t = 0; t < tp; ++t)
      out[s.layer < 0 ? r.hp.n_layer : s.layer][t] += held_bytes(s, i, rank_slice(s, tp, ep, etp, t), mp);
  }
  return out;  // [n_layer + 1][tp]: the last row holds the tensors outside the layers
}

// Every fixture with an adapter: the generic request from the config estimate holds, per layer
// and tp rank (tp 1 and 8, experts split ep 8 and etp 8), the same bytes as the adapter's
// request, as stored and in bfloat16; its KV bytes per token are the adapter's for GQA/MHA.
// MLA (DeepSeek-V3, Kimi-K2) differs by design: the generic plan counts the latent
// (kv_lora_rank + qk_rope_head_dim, whole on every rank), the adapter what blocks/mla caches
// (2 x n_head x max(qk_head_dim, v_head_dim), split over tp). Qwen3-30B-A3B-FP8 as stored
// differs too: the qwen3_moe adapter declares no FP8 block scales, so its config-only request
// counts every weight at torch_dtype (bf16), while the analysis counts the FP8 Linears at 1 B
// plus their f32 scales; converted to bf16 both agree.
TEST(GenericPlan, KnownFamiliesAgreeWithTheirAdapters) {
  const char* names[] = {"DeepSeek-V3", "Kimi-K2-Instruct", "Meta-Llama-3.1-405B", "Mixtral-8x22B-v0.1",
                         "Qwen3-0.6B", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "Qwen3-30B-A3B-FP8",
                         "WizardLM-2-8x22B"};
  for (const char* name : names) {
    SCOPED_TRACE(name);
    const std::string path = kConfigs + name + "/config.json";
    auto m = model::open_model_folder(path, model::WeightsNeeded::kIfPresent);
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto a = analysis::analyze(m->config, {}, analysis::Source::kConfig);
    ASSERT_TRUE(a.ok()) << a.status().message();
    const bool fp8_without_scales = std::string(name) == "Qwen3-30B-A3B-FP8";
    for (WeightsOnDevice w : {WeightsOnDevice::kAsStored, WeightsOnDevice::kBF16}) {
      const RequestInputs in = inputs(16, 4096, 1, w);
      auto ra = make_plan_request(*m, in);
      auto rg = make_generic_plan_request(*a, in);
      ASSERT_TRUE(ra.ok() && rg.ok());
      if (fp8_without_scales && w == WeightsOnDevice::kAsStored) {
        const auto ga = layer_bytes(*ra, 1, 1, 1), gg = layer_bytes(*rg, 1, 1, 1);
        EXPECT_LT(gg[0][0], ga[0][0]);  // FP8 + scales against bf16
        EXPECT_GT(gg[0][0] * 2, ga[0][0]);
        EXPECT_EQ(gg[ga.size() - 1], ga[ga.size() - 1]);  // embedding, norm, lm_head stay bf16
        continue;
      }
      ASSERT_EQ(rg->hp.n_layer, ra->hp.n_layer);
      EXPECT_EQ(rg->names.embed, ra->names.embed);
      EXPECT_EQ(rg->names.lm_head, ra->names.lm_head);
      EXPECT_EQ(rg->names.final_norm, ra->names.final_norm);
      const bool moe = ra->hp.n_expert > 0;
      for (auto [tp, ep, etp] : {std::tuple{1, 1, 1}, {8, moe ? 8 : 1, moe ? 1 : 8}, {8, 1, 8}}) {
        const auto ga = layer_bytes(*ra, tp, ep, etp), gg = layer_bytes(*rg, tp, ep, etp);
        for (size_t l = 0; l < ga.size(); ++l)
          ASSERT_EQ(gg[l], ga[l]) << "layer " << l << " (" << ga.size() - 1 << ": outside) tp=" << tp << " ep=" << ep;
      }
      // The analysis describes each layer as the adapter does: mixer, FFN and weights by split.
      for (size_t l = 0; l < ra->layer_descs.size(); ++l) {
        ASSERT_EQ(rg->layer_descs[l].mixer, ra->layer_descs[l].mixer) << "layer " << l;
        ASSERT_EQ(rg->layer_descs[l].ffn, ra->layer_descs[l].ffn) << "layer " << l;
        if (w == WeightsOnDevice::kBF16) {
          ASSERT_EQ(rg->layer_descs[l].weights, ra->layer_descs[l].weights) << "layer " << l;
        }
      }
    }
    auto rg = make_generic_plan_request(*a, inputs(16, 4096, 1));
    const CacheSummary g = summarize_cache(rg->layer_descs, 2);
    const auto& hp = m->hp;
    const auto* ds = std::get_if<model::DeepSeekParams>(&hp.family_params);
    if (ds && ds->mla.kv_lora_rank > 0) {
      EXPECT_EQ(g.kv_bytes_per_token, hp.n_layer * (ds->mla.kv_lora_rank + ds->mla.qk_rope_head_dim) * 2);
      EXPECT_EQ(summarize_cache(m->layers, 2).kv_bytes_per_token, hp.n_layer * 2 * hp.n_head * 192 * 2);
    } else {
      EXPECT_EQ(g.kv_bytes_per_token, hp.n_layer * 2 * hp.n_head_kv * hp.head_dim * 2);
      for (int l = 0; l < hp.n_layer; ++l) ASSERT_EQ(rg->layer_descs[l].cache, m->layers[l].cache) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace dayzero::plan

namespace dayzero::plan {
namespace {

// Kimi-K2.5's compressed-tensors pack-quantized INT4 (group 32, symmetric; attention, shared
// experts, dense MLPs and lm_head ignored): every routed expert Linear [out, in] is stored as
// weight_packed int32 [out, in / 8] (0.5 B per weight), weight_scale bf16 [out, in / 32] and
// weight_shape int32 [2]. Per matrix (2048 x 7168 or 7168 x 2048): 7,340,032 + 917,504 + 8 =
// 8,257,544 B; 60 MoE layers x 384 experts x 3 = 69,120 matrices: 570,761,441,280 B.
TEST(GenericPlan, PackQuantizedInt4AsStored) {
  const analysis::Analysis a = analysed("Kimi-K2.5");
  ASSERT_EQ(a.dims.quant_bits, 4);
  ASSERT_EQ(a.dims.quant_group, 32);
  EXPECT_EQ(a.total, 1026879374064);  // parameters as before: 8 per packed word
  const int64_t routed = a.main.routed_experts;
  EXPECT_EQ(routed, int64_t{69120} * 2048 * 7168);
  uint64_t routed_bytes = 0;
  for (const auto& g : a.groups)
    if (g.tmpl.find("experts.{E}.") != std::string::npos) routed_bytes += g.bytes;
  EXPECT_EQ(routed_bytes, 570761441280u);
  // Everything else at bf16: the other parameters x 2.
  EXPECT_EQ(a.weight_bytes, 570761441280u + static_cast<uint64_t>(a.total - routed) * 2);
  // The plan holds exactly those bytes over one replica (tp = 8, ep = 8: every expert once).
  RequestInputs in = inputs(8, 4096, 1);
  in.tp = 8;
  in.ep = 8;
  in.pp = 2;
  auto req = make_generic_plan_request(a, in);
  ASSERT_TRUE(req.ok()) << req.status().message();
  const MemoryParams mp = req->memory_params();
  int64_t routed_held = 0;
  for (size_t i = 0; i < req->specs.size(); ++i)
    if (req->specs[i].expert >= 0)
      for (int t = 0; t < 8; ++t) routed_held += held_bytes(req->specs[i], i, rank_slice(req->specs[i], 8, 8, 1, t), mp);
  EXPECT_EQ(routed_held, 570761441280);
  // etp = 8 splits the packed words and the scale groups of every expert (down: 256 words and
  // 64 groups of columns, 8 ways); the bytes are the same, except that every one of the 8 ranks
  // of an expert holds its 8-byte weight_shape: + 69,120 x 7 x 8 B.
  int64_t split_held = 0;
  for (size_t i = 0; i < req->specs.size(); ++i)
    if (req->specs[i].expert >= 0)
      for (int t = 0; t < 8; ++t) split_held += held_bytes(req->specs[i], i, rank_slice(req->specs[i], 8, 1, 8, t), mp);
  EXPECT_EQ(split_held, 570761441280 + int64_t{69120} * 7 * 8);
  auto p = choose_plan(*req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(has_caveat(*p, "weights", "4-bit integers packed in int32 plus bf16 scales per 32 weights"));
  // Converted to bf16 the same experts hold 2 B per weight and no scales.
  in.weights = WeightsOnDevice::kBF16;
  auto bf = make_generic_plan_request(a, in);
  ASSERT_TRUE(bf.ok());
  const MemoryParams mb = bf->memory_params();
  int64_t bf_held = 0;
  for (size_t i = 0; i < bf->specs.size(); ++i)
    if (bf->specs[i].expert >= 0 || bf->specs[i].component == model::Component::kQuantScale)
      bf_held += held_bytes(bf->specs[i], i, Slice{true, -1, 0, 0}, mb);
  EXPECT_EQ(bf_held, routed * 2);
}

// The same format in headers: 2 layers of Kimi-K2.5 (dense layer 0, MoE layer 1 with 8 of its
// experts), the real names and dtypes (I32 packed words and shapes, BF16 scales), data as holes.
TEST(GenericPlan, PackQuantizedInt4Headers) {
  std::ifstream f(kConfigs + "Kimi-K2.5/config.json");
  nlohmann::json config = nlohmann::json::parse(f);
  config["text_config"]["num_hidden_layers"] = 2;
  config["text_config"]["n_routed_experts"] = 8;
  config.erase("vision_config");
  auto dims = analysis::read_dims(config);
  ASSERT_TRUE(dims.ok()) << dims.status().message();
  auto tensors = analysis::synthesize_tensors(*dims);
  int packed = 0;
  for (auto& t : tensors) {
    const auto ends = [&](const char* x) { return t.name.size() > strlen(x) && t.name.rfind(x) == t.name.size() - strlen(x); };
    t.dtype = ends(".weight_packed") || ends(".weight_shape") ? "I32" : "BF16";
    packed += ends(".weight_packed");
  }
  ASSERT_EQ(packed, 8 * 3);  // only the routed experts are quantized
  const fs::path dir = fs::temp_directory_path() / ("dayzero-generic-int4-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  write_headers_only(dir / "model.safetensors", tensors);
  auto h = analysis::analyze_path(dir.string());
  auto c = analysis::analyze(config, {}, analysis::Source::kConfig);
  fs::remove_all(dir);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(h->source, analysis::Source::kHeaders);
  EXPECT_EQ(h->total, c->total);
  EXPECT_EQ(h->weight_bytes, c->weight_bytes);
  EXPECT_EQ(h->main.routed_experts, int64_t{8} * 3 * 2048 * 7168);
  // 8 x 3 x 8,257,544 B of experts.
  uint64_t routed_bytes = 0;
  for (const auto& g : h->groups)
    if (g.tmpl.find("experts.{E}.") != std::string::npos) routed_bytes += g.bytes;
  EXPECT_EQ(routed_bytes, uint64_t{24} * 8257544);
  RequestInputs in = inputs(1, 128, 1);
  in.dp = in.pp = in.tp = 1;
  in.world_size = 1;
  auto req = make_generic_plan_request(*h, in);
  ASSERT_TRUE(req.ok()) << req.status().message();
  auto p = choose_plan(*req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory[0].weights, static_cast<int64_t>(h->weight_bytes));
}

}  // namespace
}  // namespace dayzero::plan

namespace dayzero::plan {
namespace {

// gpt-oss-120b as published: GptOssConfig's defaults in transformers 5.24
// (models/gpt_oss/configuration_gpt_oss.py: 36 layers, 128 experts top-4, hidden and
// intermediate 2880, 64 q / 8 kv heads of 64, vocab 201088, window 128, attention_bias,
// sliding/full layer_types alternating, YaRN x32) and the quantization_config its conversion
// script writes (MXFP4 experts; attention, router, embedding and lm_head not converted).
nlohmann::json gpt_oss_120b() {
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 36; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"architectures", {"GptOssForCausalLM"}}, {"model_type", "gpt_oss"}, {"vocab_size", 201088},
          {"hidden_size", 2880}, {"intermediate_size", 2880}, {"num_hidden_layers", 36},
          {"num_attention_heads", 64}, {"num_key_value_heads", 8}, {"head_dim", 64},
          {"num_local_experts", 128}, {"num_experts_per_tok", 4}, {"experts_per_token", 4},
          {"sliding_window", 128}, {"layer_types", types}, {"attention_bias", true},
          {"tie_word_embeddings", false}, {"max_position_embeddings", 131072}, {"torch_dtype", "bfloat16"},
          {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                            {"original_max_position_embeddings", 4096}}},
          {"quantization_config",
           {{"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}}}};
}

uint64_t bytes_of(const analysis::Analysis& a, const std::string& suffix) {
  uint64_t b = 0;
  for (const auto& g : a.groups)
    if (g.tmpl.size() >= suffix.size() && g.tmpl.compare(g.tmpl.size() - suffix.size(), suffix.size(), suffix) == 0)
      b += g.bytes;
  return b;
}

// Per MoE layer, as stored (E 128, hidden = ffn = 2880, 90 blocks of 32 per row):
//   gate_up_proj_blocks U8 [128, 5760, 90, 16] 1,061,683,200 B, _scales U8 [128, 5760, 90]
//   66,355,200 B, _bias BF16 [128, 5760] 1,474,560 B; down_proj_blocks U8 [128, 2880, 90, 16]
//   530,841,600 B, _scales 33,177,600 B, _bias 737,280 B: 1,694,269,440 B of experts holding
//   3,186,155,520 parameters (2 per block byte). The rest of a layer is bf16: attention with
//   biases and sinks, router with bias, two norms: 26,924,672 parameters.
// Whole model: 116,829,156,672 parameters (the model card's 116.83B, "117B"; within 0.2%),
// 65,248,815,744 B (60.77 GiB: the card's 60.8 GiB checkpoint). Activated 5,711,982,912 with
// the embedding table; the card's 5.13B ("5.1B active") leaves the embedding out: 5,132,849,472.
TEST(GenericPlan, Mxfp4GptOss120bEstimate) {
  auto r = analysis::analyze(gpt_oss_120b(), {}, analysis::Source::kConfig);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const analysis::Analysis& a = *r;
  EXPECT_TRUE(a.dims.mxfp4);
  EXPECT_EQ(a.total, 116829156672);
  EXPECT_NEAR(static_cast<double>(a.total), 117e9, 0.02 * 117e9);
  EXPECT_EQ(a.activated - a.main.embedding, 5132849472);
  EXPECT_NEAR(static_cast<double>(a.activated - a.main.embedding), 5.1e9, 0.05 * 5.1e9);
  EXPECT_EQ(a.main.routed_experts, int64_t{36} * 3186155520);
  EXPECT_EQ(a.weight_bytes, 65248815744u);
  EXPECT_EQ(bytes_of(a, "_blocks"), uint64_t{36} * (1061683200 + 530841600));
  EXPECT_EQ(bytes_of(a, "_scales"), uint64_t{36} * (66355200 + 33177600));
  EXPECT_EQ(a.scale_tensors, 72);
  for (const auto& x : a.tensors) {
    if (x.name.find("_blocks") != std::string::npos || x.name.find("_scales") != std::string::npos) {
      ASSERT_EQ(x.dtype, "U8") << x.name;
    }
  }
  EXPECT_EQ(a.parts.at("attention sinks"), 36 * 64);
  EXPECT_EQ(a.main.router, 36 * (128 * 2880 + 128));
  // inspect's text: the quantization line and MXFP4 among the precision-sensitive points.
  std::ostringstream o;
  analysis::print_text(o, a);
  EXPECT_NE(o.str().find("quantization mxfp4 e2m1 in blocks of 32 with e8m0 scales"), std::string::npos) << o.str();
  bool named = false;
  for (const auto& p : a.precision) named = named || p.find("MXFP4 weights: 72 tensor(s)") != std::string::npos;
  EXPECT_TRUE(named);
  bool sinks = false, sliding = false;
  for (const auto& f : a.features) {
    sinks = sinks || (f.name == "attention sinks" && f.status == analysis::FeatureStatus::kNewBlock);
    sliding = sliding || (f.name == "sliding window" && f.detail == "window 128 in 18 layers");
  }
  EXPECT_TRUE(sinks && sliding);
  // Negative control: with the experts in modules_to_not_convert they are bf16, 2 B a weight.
  nlohmann::json plain = gpt_oss_120b();
  plain["quantization_config"]["modules_to_not_convert"].push_back("model.layers.*.mlp.experts");
  auto b = analysis::analyze(plain, {}, analysis::Source::kConfig);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->total, a.total);
  EXPECT_EQ(b->scale_tensors, 0);
  EXPECT_EQ(b->weight_bytes, static_cast<uint64_t>(a.total) * 2);
  // The plan as stored holds exactly those bytes on one rank; converted to bf16 the experts
  // take 2 B per weight and the scales nothing.
  RequestInputs in = inputs(1, 128, 1);
  in.dp = in.pp = in.tp = 1;
  in.world_size = 1;
  auto req = make_generic_plan_request(a, in);
  ASSERT_TRUE(req.ok()) << req.status().message();
  auto p = choose_plan(*req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory[0].weights, 65248815744);
  EXPECT_TRUE(has_caveat(*p, "weights", "uint8 blocks of two e2m1 values plus one uint8 e8m0 scale per 32"));
  // tp = 8: the fused expert tensors split 16 experts a rank, each expert held once; the
  // attention and the rest replicated or split as before.
  {
    RequestInputs in8 = inputs(1, 128, 1);
    in8.dp = in8.pp = 1;
    in8.tp = 8;
    in8.ep = 8;
    in8.world_size = 8;
    auto r8 = make_generic_plan_request(a, in8);
    ASSERT_TRUE(r8.ok()) << r8.status().message();
    const MemoryParams m8 = r8->memory_params();
    int64_t experts_held = 0, rank0 = 0;
    for (size_t i = 0; i < r8->specs.size(); ++i) {
      const auto& s = r8->specs[i];
      if (s.name.find("mlp.experts.") == std::string::npos) continue;
      for (int t = 0; t < 8; ++t) {
        const int64_t b = held_bytes(s, i, rank_slice(s, 8, 8, 1, t), m8);
        experts_held += b;
        if (t == 0) rank0 += b;
      }
    }
    EXPECT_EQ(experts_held, int64_t{36} * 1694269440);
    EXPECT_EQ(rank0, int64_t{36} * 1694269440 / 8);
  }
  in.weights = WeightsOnDevice::kBF16;
  auto bf = make_generic_plan_request(a, in);
  ASSERT_TRUE(bf.ok());
  const MemoryParams mb = bf->memory_params();
  int64_t bf_held = 0;
  for (size_t i = 0; i < bf->specs.size(); ++i) bf_held += held_bytes(bf->specs[i], i, Slice{true, -1, 0, 0}, mb);
  EXPECT_EQ(bf_held, a.total * 2);
}

// Headers only: 2 layers of gpt-oss-120b (sliding then full attention) with 8 of its experts,
// the real names, dtypes (U8 blocks and scales, BF16 rest) and shapes; data as holes. Each
// layer's bytes are the estimate's: 8 / 128 of the experts' 1,694,269,440 B plus the bf16 rest.
TEST(GenericPlan, Mxfp4GptOssHeaders) {
  nlohmann::json config = gpt_oss_120b();
  config["num_hidden_layers"] = 2;
  config["num_local_experts"] = 8;
  config["layer_types"] = {"sliding_attention", "full_attention"};
  auto dims = analysis::read_dims(config);
  ASSERT_TRUE(dims.ok()) << dims.status().message();
  auto tensors = analysis::synthesize_tensors(*dims);
  int blocks = 0;
  for (auto& t : tensors) {
    const bool mx = t.name.find("_blocks") != std::string::npos || t.name.find("_scales") != std::string::npos;
    t.dtype = mx ? "U8" : "BF16";
    blocks += t.name.find("_blocks") != std::string::npos;
  }
  ASSERT_EQ(blocks, 4);
  const fs::path dir = fs::temp_directory_path() / ("dayzero-generic-mxfp4-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
  write_headers_only(dir / "model.safetensors", tensors);
  auto h = analysis::analyze_path(dir.string());
  auto c = analysis::analyze(config, {}, analysis::Source::kConfig);
  fs::remove_all(dir);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(h->source, analysis::Source::kHeaders);
  EXPECT_EQ(h->unknown_tensors, 0);
  EXPECT_EQ(h->total, c->total);
  EXPECT_EQ(h->main.routed_experts, 2 * 3186155520 / 16);
  auto layer_bytes = [](const analysis::Analysis& a, int l) {
    uint64_t b = 0;
    for (const auto& x : a.tensors)
      if (analysis::classify(x.name, a.dims).layer == l) b += x.bytes;
    return b;
  };
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(layer_bytes(*h, l), layer_bytes(*c, l)) << "layer " << l;
    // the router of 8 experts: 120 x (2880 + 1) parameters fewer than of 128
    EXPECT_EQ(layer_bytes(*h, l), 1694269440u / 16 + (26924672u - 120 * 2881) * 2) << "layer " << l;
  }
  EXPECT_EQ(h->weight_bytes, c->weight_bytes);
  EXPECT_EQ(h->scale_tensors, 4);
  RequestInputs in = inputs(1, 128, 1);
  in.dp = in.pp = in.tp = 1;
  in.world_size = 1;
  auto req = make_generic_plan_request(*h, in);
  ASSERT_TRUE(req.ok()) << req.status().message();
  auto p = choose_plan(*req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->memory[0].weights, static_cast<int64_t>(h->weight_bytes));
}

}  // namespace
}  // namespace dayzero::plan
