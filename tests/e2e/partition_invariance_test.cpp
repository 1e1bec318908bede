// Partition invariance: tiny 4-layer llama and qwen3 checkpoints (and the MoE families, the sparse
// attention of deepseek_v32 and glm_moe_dsa and qwen3_next's hybrid linear attention among them, under
// expert-parallel plans) run once on one rank, then under
// tp2, tp4 (more tp ranks than kv heads), pp2, pp4, tp2 x pp2, dp2 x tp2 and an uneven pp3, each
// fixed with `parallel:`. The union of the rank files must hold exactly the one-rank run's keys,
// each written once by the rank the plan makes its owner, with every activation and logits_last
// close to the one-rank values and the same generated ids and top-k ids. Not a determinism test
// (run_determinism_test.cpp) and not an accuracy test (hf_golden_test.cpp).
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kLayers = 4;
constexpr int kMaxNewTokens = 6;
constexpr int kTopK = 5;
// fp32 throughout, but a tp group sums partial products (o_proj, down_proj, the embedding) in
// another order than one rank does, and those rounding differences travel through the layers.
// Measured over every plan and family below (4 layers, width 64): at most 8.9e-7 relative L2
// (dp2 batches decode fewer sequences together: at most 7.7e-7). A wrong slice or a missing
// all-reduce is O(1); a tenfold rms_norm_eps is ~1e-4 (ToleranceSeesATenfoldEps).
constexpr double kRelL2Tol = 2e-6;
// The hybrids' gated norms and output gates amplify the reordered tp sums, most in the small
// gated attention outputs: measured at every tp2 plan in layers.3.attn_out in decode, with the
// Gated DeltaNet tensors split by heads, the reference and the plan on one GEMM path. Per path on
// an AMD EPYC Zen 4 (docs/testing.md, "Kernel paths"): qwen3_next 1.88-2.52e-6, qwen3_5_moe
// 1.97e-6 (avx2) to 3.87e-6 (the OpenBLAS large-M path); the reference and the plan on two
// different large-M paths (a start-up timing that picked OpenBLAS for one and oneDNN for the
// other) gave 4.57e-6 and 8.07e-6, which is why the runs compared here share a path
// (same_gemm_paths_in_every_run). qwen3_5_moe's tenfold rms_norm_eps is 1.58
// (ToleranceSeesATenfoldEps).
double rel_l2_tol(const std::string& family) {
  if (family == "qwen3_next") return 3e-6;
  if (family == "qwen3_5_moe") return 5e-6;
  return kRelL2Tol;
}

// Prompt order fixes the dp replica of each prompt: prompt i runs on replica i % dp.
const char* const kPromptIds[] = {"capital", "greeting", "raw"};

std::string sizes_yaml(const std::string& family) {
  std::string y = "family: " + family + "\n"
                  "n_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) + "\n"
                  "n_head: 4\nn_head_kv: 2\nn_ff: 128\nseed: 23\n";
  // qwen3's q/k norms over a head_dim that does not divide n_embd / n_head.
  if (family == "qwen3" || family == "qwen3_moe" || family == "qwen3_next" || family == "qwen3_5_moe")
    y += "head_dim: 32\n";
  // Routed experts: 8, top-2, so ep = 4 still gives every rank two experts.
  if (family == "mixtral" || family == "qwen3_moe" || family == "qwen3_next" || family == "qwen3_5_moe")
    y += "n_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\n";
  // MLA, group-limited sigmoid routing over 4 groups, a shared expert, layer 0 dense; the FP8
  // variant loads tp slices of block-quantized weights.
  if (family.starts_with("deepseek_v3") || family == "glm_moe_dsa") y += "n_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\n";
  if (family == "deepseek_v3_fp8") y = "family: deepseek_v3\ndtype: fp8\n" + y.substr(y.find('\n') + 1);
  // DeepSeek-V4: 8 heads of 32 in 4 output groups (tp4 gives every rank one group), layers
  // sliding / CSA / HCA / CSA with windows of 8, CSA entries per 4 tokens and HCA per 8, so the
  // prompts and their decode cross each; layer 0 hash-routed; 2 residual streams.
  if (family == "deepseek_v4")
    y = "family: deepseek_v4\nn_vocab: 512\nn_embd: 64\nn_layer: 4\nn_head: 8\nhead_dim: 32\nn_ff: 128\nseed: 23\n"
        "n_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\n";
  return y;
}

std::string run_config(const fs::path& model, const std::string& parallel) {
  return "model: {path: " + model.string() + ", dtype: float32}\n" +
         (parallel.empty() ? "" : "parallel: " + parallel + "\n") +
         "prompts:\n"
         "  - {id: capital, text: \"The capital of France is\"}\n"
         "  - {id: greeting, text: \"Hello, world! How are you today?\"}\n"
         "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n"
         "generate: {max_new_tokens: " + std::to_string(kMaxNewTokens) +
         ", stop_at_eos: false, top_k_record: " + std::to_string(kTopK) + "}\n"
         "dump:\n"
         "  dir: unused-overridden-by-dump-dir\n"
         "  activations: {layers: all, phase: both, mode: full}\n";
}

struct PlanCase {
  const char* name;
  int dp, pp, tp;
  int ep = 0;  // MoE: experts split over ep of the tp ranks (etp = tp / ep); 0 leaves it to the planner
  int world() const { return dp * pp * tp; }
};

void PrintTo(const PlanCase& p, std::ostream* os) { *os << p.name; }

const PlanCase kPlans[] = {
    {"tp2", 1, 1, 2},     {"tp4", 1, 1, 4},       {"pp2", 1, 2, 1}, {"pp4", 1, 4, 1},
    {"tp2_pp2", 1, 2, 2}, {"dp2_tp2", 2, 1, 2},   {"pp3", 1, 3, 1},
};

// Expert parallel plans for the MoE families: tp = ep x etp inside a stage.
const PlanCase kMoePlans[] = {
    {"tp2_ep2", 1, 1, 2, 2},  {"tp2_ep1_etp2", 1, 1, 2, 1}, {"tp4_ep2_etp2", 1, 1, 4, 2},
    {"tp4_ep4", 1, 1, 4, 4},  {"pp2_tp2_ep2", 1, 2, 2, 2},  {"dp2_tp2_ep2", 2, 1, 2, 2},
};

// DeepSeek sparse attention (deepseek_v32, glm_moe_dsa; index_topk 8: the prompts and their
// decode pass it): the indexer runs where its MLA layer runs, its key cache carried through
// decode. glm_moe_dsa's layers 1 and 3 reuse the top-k of the layer before: pp2 splits 2 + 2.
const PlanCase kDsaPlans[] = {
    {"tp2_ep1_etp2", 1, 1, 2, 1}, {"pp2", 1, 2, 1}, {"pp2_tp2_ep2", 1, 2, 2, 2}, {"tp2_ep2", 1, 1, 2, 2},
};

// Hybrid linear attention (qwen3_next: Gated DeltaNet layers 0 and 2, gated full attention 1 and
// 3, so every pp2 stage holds both): the linear layers' state carried through decode; qwen3_5_moe
// the same with the split projections (in_proj_qkv's [q | k | v] rows split by heads per section).
// DeepSeek-V4: query heads, sinks and output groups split over tp (the one K=V head, the
// compressors, the indexer and the mHC mixing replicated), the residual streams passed between
// stages, the window / compressor / indexer state carried through decode per rank.
const PlanCase kV4Plans[] = {
    {"tp2", 1, 1, 2}, {"tp4", 1, 1, 4}, {"pp2", 1, 2, 1}, {"tp2_ep2", 1, 1, 2, 2},
};

const PlanCase kHybridPlans[] = {
    {"tp2", 1, 1, 2}, {"pp2", 1, 2, 1}, {"tp2_pp2", 1, 2, 2}, {"tp2_ep2", 1, 1, 2, 2},
};

bool is_moe(const std::string& family) {
  return family == "mixtral" || family == "qwen3_moe" || family == "qwen3_next" || family == "qwen3_5_moe" ||
         family.starts_with("deepseek_v3") || family == "glm_moe_dsa" || family == "deepseek_v4";
}
// deepseek_v3's first layer is dense (first_k_dense_replace 1 in make-model).
int moe_layers(const std::string& family) {
  return !is_moe(family) ? 0 : family.starts_with("deepseek_v3") || family == "glm_moe_dsa" ? kLayers - 1 : kLayers;
}
// Layers with an indexer of their own, each dumping index_topk_ids.
int indexer_layers(const std::string& family) {
  return family == "deepseek_v32" ? kLayers : family == "glm_moe_dsa" || family == "deepseek_v4" ? kLayers / 2 : 0;
}
// Points outside the layers besides embed, final_norm and logits: DeepSeek-V4's hc_head.
int extra_points(const std::string& family) { return family == "deepseek_v4" ? 1 : 0; }

struct FamilyModel {
  fs::path dir, model;
  MergedDump reference;
};

// The model and the one-rank reference run of a family, made once.
const FamilyModel& family_model(const std::string& family) {
  static std::map<std::string, FamilyModel> cache;
  auto it = cache.find(family);
  if (it != cache.end()) return it->second;
  FamilyModel m;
  m.dir = scratch_dir("partition-invariance-" + family);
  m.model = m.dir / "model";
  write_file(m.dir / "sizes.yaml", sizes_yaml(family));
  make_model_from_yaml(m.dir / "sizes.yaml", m.model, family == "deepseek_v3_fp8" ? "" : "--dtype float32");
  write_file(m.dir / "reference.yaml", run_config(m.model, ""));
  const Outcome o = run_dayzero("run " + (m.dir / "reference.yaml").string() + " --dump-dir " +
                                (m.dir / "run-reference").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  if (o.exit_code == 0) merge_rank_files(m.dir / "run-reference", 1, m.reference);
  return cache.emplace(family, std::move(m)).first->second;
}

// The decoder layer of an activation name ("layers.3.ffn_out" -> 3), -1 for embed, and kLayers
// for the parts after the last layer (final_norm, logits).
int layer_of(const std::string& name) {
  if (name == "embed") return -1;
  if (name.rfind("layers.", 0) == 0) return std::stoi(name.substr(7));
  return kLayers;
}

// The rank that must write a key under plan.json's stages: the owning stage's tp rank 0 in the
// dp replica that runs the prompt (rank = ((dp * pp) + pp_rank) * tp + tp_rank).
int expected_writer(const std::string& key, const json& plan) {
  const std::string rest = key.substr(key.find('/') + 1);
  const std::string prompt = rest.substr(0, rest.find('/'));
  int index = -1;
  for (int i = 0; i < static_cast<int>(std::size(kPromptIds)); ++i)
    if (prompt == kPromptIds[i]) index = i;
  const int dp = plan.at("dp"), pp = plan.at("pp"), tp = plan.at("tp");
  const int replica = index % dp;
  int layer = kLayers;  // outputs: the last stage
  if (key.rfind("activations/", 0) == 0) layer = layer_of(rest.substr(rest.rfind('/') + 1));
  int stage = -1;
  for (const json& s : plan.at("stages")) {
    const int b = s.at("layer_begin"), e = s.at("layer_end");
    if ((layer == -1 && s.at("has_embedding").get<bool>()) || (layer == kLayers && s.at("has_lm_head").get<bool>()) ||
        (layer >= b && layer < e))
      stage = s.at("pp");
  }
  if (index < 0 || stage < 0) return -1;
  return (replica * pp + stage) * tp;
}

// The keys a dense 4-layer run writes: 3 prompts x 2 phases x (embed, 5 points x 4 layers,
// final_norm, logits), plus 5 output datasets per prompt.
constexpr size_t kReferenceKeys = 3 * (2 * (1 + 5 * kLayers + 2) + 5);

class PartitionInvariance : public ::testing::TestWithParam<std::tuple<const char*, PlanCase>> {};

TEST_P(PartitionInvariance, MatchesOneRank) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  same_gemm_paths_in_every_run();
  const std::string family = std::get<0>(GetParam());
  const PlanCase plan_case = std::get<1>(GetParam());
  const std::string label = family + " " + plan_case.name;
  const FamilyModel& m = family_model(family);
  ASSERT_FALSE(HasFailure()) << family << ": the reference run failed";
  const MergedDump& want = m.reference;
  // MoE layers add router_logits and topk_ids per layer, prompt and phase; DSA index_topk_ids.
  const size_t moe_keys = 2u * static_cast<size_t>(moe_layers(family)) * 3 * 2 +
                          static_cast<size_t>(indexer_layers(family)) * 3 * 2 +
                          static_cast<size_t>(extra_points(family)) * 3 * 2;
  ASSERT_EQ(want.size(), kReferenceKeys + moe_keys) << family << ": the reference run lacks keys";
  ASSERT_EQ(want.count("activations/raw/decode/layers.3.layer_out"), 1u);

  const fs::path config = m.dir / (std::string(plan_case.name) + ".yaml");
  const fs::path run_dir = m.dir / (std::string("run-") + plan_case.name);
  write_file(config, run_config(m.model, "{dp: " + std::to_string(plan_case.dp) + ", pp: " +
                                             std::to_string(plan_case.pp) + ", tp: " + std::to_string(plan_case.tp) +
                                             (plan_case.ep ? ", ep: " + std::to_string(plan_case.ep) : "") + "}"));
  const Outcome o = run_dayzero_mpi(plan_case.world(), "run " + config.string() + " --dump-dir " + run_dir.string());
  ASSERT_EQ(o.exit_code, 0) << label << "\n" << o.output;

  // plan.json and every rank file's root attributes carry the sizes that were asked for.
  const json plan = json::parse(read_file(run_dir / "plan.json"), nullptr, false);
  ASSERT_FALSE(plan.is_discarded()) << label << ": plan.json";
  EXPECT_EQ(plan.value("world_size", -1), plan_case.world()) << label;
  EXPECT_EQ(plan.value("dp", -1), plan_case.dp) << label;
  EXPECT_EQ(plan.value("pp", -1), plan_case.pp) << label;
  EXPECT_EQ(plan.value("tp", -1), plan_case.tp) << label;
  if (plan_case.ep) {
    EXPECT_EQ(plan.value("ep", -1), plan_case.ep) << label;
    EXPECT_EQ(plan.value("etp", -1), plan_case.tp / plan_case.ep) << label;
  }
  ASSERT_EQ(plan.at("stages").size(), static_cast<size_t>(plan_case.pp)) << label;
  int next_layer = 0;
  for (const json& s : plan.at("stages")) {
    EXPECT_EQ(s.value("layer_begin", -1), next_layer) << label << ": stages tile the layers in order";
    EXPECT_GT(s.value("layer_end", -1), s.value("layer_begin", -1)) << label << ": an empty stage";
    next_layer = s.value("layer_end", -1);
  }
  EXPECT_EQ(next_layer, kLayers) << label;
  for (int r = 0; r < plan_case.world(); ++r) {
    auto reader = dump::DumpReader::open(rank_dump(run_dir, r).string());
    ASSERT_TRUE(reader.ok()) << label << ": " << reader.status().message();
    auto a = reader->root_attributes();
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ(a->rank, r) << label;
    EXPECT_EQ(a->world_size, plan_case.world()) << label << " rank " << r;
    EXPECT_EQ(a->dp, plan_case.dp) << label << " rank " << r;
    EXPECT_EQ(a->pp, plan_case.pp) << label << " rank " << r;
    EXPECT_EQ(a->tp, plan_case.tp) << label << " rank " << r;
    EXPECT_EQ(json::parse(a->plan, nullptr, false), plan) << label << " rank " << r << ": plan attribute";
  }

  MergedDump got;
  ASSERT_NO_FATAL_FAILURE(merge_rank_files(run_dir, plan_case.world(), got)) << label;
  std::set<std::string> want_keys, got_keys;
  for (const auto& [k, v] : want) want_keys.insert(k);
  for (const auto& [k, v] : got) got_keys.insert(k);
  std::vector<std::string> key_diffs;
  for (const auto& k : want_keys)
    if (!got_keys.count(k)) key_diffs.push_back(k + " is in no rank file");
  for (const auto& k : got_keys)
    if (!want_keys.count(k)) key_diffs.push_back(k + " is not in the 1-rank run");
  ASSERT_TRUE(key_diffs.empty()) << first_lines(label + ": the keys differ from the 1-rank run's", key_diffs);

  std::vector<std::string> writers;
  for (const auto& [key, w] : want) {
    const int writer = expected_writer(key, plan);
    if (got.at(key).rank != writer)
      writers.push_back(key + " written by rank " + std::to_string(got.at(key).rank) + ", owner rank " +
                        std::to_string(writer));
  }
  const DumpDiff diff = diff_dumps(want, got, rel_l2_tol(family));
  const std::vector<std::string>& mismatches = diff.mismatches;
  const double worst = diff.worst;
  const std::string& worst_key = diff.worst_key;
  EXPECT_TRUE(writers.empty()) << first_lines(label + ": keys not written by their owning rank", writers);
  std::ostringstream heading;
  heading << label << ": datasets differ from the 1-rank run (relative L2 tolerance " << rel_l2_tol(family) << ")";
  EXPECT_TRUE(mismatches.empty()) << first_lines(heading.str(), mismatches);
  if (worst_key.empty())
    std::printf("[ worst    ] %-14s every float dataset bit-identical to the 1-rank run\n", label.c_str());
  else
    std::printf("[ worst    ] %-14s relative L2 %.3g at %s\n", label.c_str(), worst, worst_key.c_str());
}

// Negative control: the same one-rank run on a copy of the llama model whose config.json has
// a tenfold rms_norm_eps must differ from the reference beyond kRelL2Tol, so the tolerance can
// see a precision-level bug and not only a wrong slice.
// The hybrids' looser tolerance gets the same control on qwen3_5_moe (its eps in text_config).
class PartitionInvarianceTolerance : public ::testing::TestWithParam<const char*> {};

TEST_P(PartitionInvarianceTolerance, ToleranceSeesATenfoldEps) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  same_gemm_paths_in_every_run();
  const std::string family = GetParam();
  const FamilyModel& m = family_model(family);
  ASSERT_FALSE(HasFailure()) << family << ": the reference run failed";
  const fs::path model = m.dir / "model-eps-x10";
  fs::remove_all(model);
  fs::copy(m.model, model, fs::copy_options::recursive);
  json config = json::parse(read_file(model / "config.json"));
  json& text = config.contains("text_config") ? config["text_config"] : config;
  text["rms_norm_eps"] = text.at("rms_norm_eps").get<double>() * 10;
  write_file(model / "config.json", config.dump(2));
  write_file(m.dir / "eps-x10.yaml", run_config(model, ""));
  const fs::path run_dir = m.dir / "run-eps-x10";
  const Outcome o = run_dayzero("run " + (m.dir / "eps-x10.yaml").string() + " --dump-dir " + run_dir.string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  MergedDump got;
  ASSERT_NO_FATAL_FAILURE(merge_rank_files(run_dir, 1, got));
  double worst = 0;
  std::string worst_key;
  for (const auto& [key, w] : m.reference) {
    if (w.integer || !got.count(key) || key.rfind("activations/", 0) != 0) continue;
    const double e = rel_l2(w.values, got.at(key).values);
    if (e > worst) worst = e, worst_key = key;
  }
  std::printf("[ control  ] %s rms_norm_eps x10: worst relative L2 %.3g at %s (tolerance %.3g)\n", family.c_str(),
              worst, worst_key.c_str(), rel_l2_tol(family));
  EXPECT_GT(worst, rel_l2_tol(family)) << family << ": a tenfold rms_norm_eps passes the partition tolerance";
}

INSTANTIATE_TEST_SUITE_P(Families, PartitionInvarianceTolerance, ::testing::Values("llama", "qwen3_5_moe", "deepseek_v4"));

std::string case_name(const ::testing::TestParamInfo<PartitionInvariance::ParamType>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Plans, PartitionInvariance,
                         ::testing::Combine(::testing::Values("llama", "qwen3"), ::testing::ValuesIn(kPlans)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(MoePlans, PartitionInvariance,
                         ::testing::Combine(::testing::Values("mixtral", "qwen3_moe", "deepseek_v3", "deepseek_v3_fp8"),
                                            ::testing::ValuesIn(kMoePlans)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(HybridPlans, PartitionInvariance,
                         ::testing::Combine(::testing::Values("qwen3_next", "qwen3_5_moe"), ::testing::ValuesIn(kHybridPlans)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(V4Plans, PartitionInvariance,
                         ::testing::Combine(::testing::Values("deepseek_v4"), ::testing::ValuesIn(kV4Plans)), case_name);
INSTANTIATE_TEST_SUITE_P(DsaPlans, PartitionInvariance,
                         ::testing::Combine(::testing::Values("deepseek_v32", "glm_moe_dsa"), ::testing::ValuesIn(kDsaPlans)),
                         case_name);

}  // namespace
}  // namespace dayzero::e2e
