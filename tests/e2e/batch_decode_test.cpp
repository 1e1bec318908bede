// Batched decode: for every family, the same prompts run with generate.max_batch: 1 (one
// sequence decoded at a time) and with a max_batch that holds them all (decoded together, one
// leaving early at an EOS), on one rank and under tp2 and pp2. Generated ids and top-k ids must
// be identical and every activation close; the dump's peak_kv_cache_bytes must grow with
// max_batch and stay within the plan's kv_cache estimate. Not a partition test
// (partition_invariance_test.cpp): both runs of a pair use the same plan.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "dump/dump_reader.h"
#include "kernels/ops.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kLayers = 2;
constexpr int kMaxNewTokens = 6;
// Batching changes the GEMM shapes of decode (M = live sequences instead of M = 1, which the
// GEMM paths run as a matrix-vector product with other blocking), so rows are summed in another
// order; prefill is the same call as before and stays bit-identical. Measured over every family
// and plan here: at most 4.2e-7 (layers.1.ffn_out of a decode step). A row of another prompt, or
// attention over another sequence's cache, is O(1) off. Kept just above what was measured.
constexpr double kRelL2Tol = 1e-6;

// Four prompts of three lengths; "mid" and "mid2" have the same length (the negative control).
struct PromptDef {
  const char* id;
  std::vector<int32_t> tokens;
};
const PromptDef kPrompts[] = {
    {"long", {3, 17, 42, 99, 5, 250, 11}},
    {"short", {7, 8}},
    {"mid", {100, 200, 300, 400}},
    {"mid2", {61, 62, 63, 64}},
};

std::string sizes_yaml(const std::string& family) {
  std::string y = "family: " + family + "\nn_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) +
                  "\nn_head: 4\nn_head_kv: 2\nn_ff: 128\nseed: 31\n";
  if (family == "qwen3" || family == "qwen3_moe") y += "head_dim: 32\n";
  if (family == "mixtral" || family == "qwen3_moe" || family == "deepseek_v3")
    y += "n_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\n";
  if (family == "qwen2") y += "tie_embeddings: true\n";
  return y;
}

std::string prompts_yaml(size_t n_prompts) {
  std::string y = "prompts:\n";
  for (size_t i = 0; i < n_prompts; ++i) {
    const PromptDef& p = kPrompts[i % std::size(kPrompts)];
    std::string ids;
    for (int32_t t : p.tokens) ids += (ids.empty() ? "" : ", ") + std::to_string(t);
    const std::string id = i < std::size(kPrompts) ? p.id : std::string(p.id) + "_" + std::to_string(i);
    y += "  - {id: " + id + ", tokens: [" + ids + "]}\n";
  }
  return y;
}

std::string run_config(const fs::path& model, const std::string& parallel, int max_batch, bool stop_at_eos,
                       size_t n_prompts = std::size(kPrompts)) {
  return "model: {path: " + model.string() + ", dtype: float32}\n" +
         (parallel.empty() ? "" : "parallel: " + parallel + "\n") + prompts_yaml(n_prompts) +
         "generate: {max_new_tokens: " + std::to_string(kMaxNewTokens) +
         ", stop_at_eos: " + (stop_at_eos ? "true" : "false") + ", top_k_record: 5, max_batch: " +
         std::to_string(max_batch) + "}\n"
         "dump:\n"
         "  dir: unused-overridden-by-dump-dir\n"
         "  activations: {layers: all, phase: both, mode: full}\n";
}

struct Plan {
  const char* name;
  int ranks;
  const char* parallel;  // the run config's parallel: value, empty for one rank
};
const Plan kPlans[] = {{"1rank", 1, ""}, {"tp2", 2, "{tp: 2}"}, {"pp2", 2, "{pp: 2}"}};

Outcome run_plan(const Plan& plan, const fs::path& config, const fs::path& run_dir) {
  const std::string args = "run " + config.string() + " --dump-dir " + run_dir.string();
  return plan.ranks == 1 ? run_dayzero(args) : run_dayzero_mpi(plan.ranks, args);
}

// The family's model, with generation_config.json's eos set to a token that one prompt emits
// early and another never does, so the batch shrinks while it decodes.
struct FamilyModel {
  fs::path dir, model;
  int32_t eos = -1;
  std::map<std::string, size_t> expected_steps;  // prompt -> generated tokens with that eos
};

const FamilyModel& family_model(const std::string& family) {
  static std::map<std::string, FamilyModel> cache;
  if (auto it = cache.find(family); it != cache.end()) return it->second;
  FamilyModel m;
  m.dir = scratch_dir("batch-decode-" + family);
  m.model = m.dir / "model";
  write_file(m.dir / "sizes.yaml", sizes_yaml(family));
  make_model_from_yaml(m.dir / "sizes.yaml", m.model, "--dtype float32");
  // A probe run without EOS stops gives every prompt's full greedy continuation.
  write_file(m.dir / "probe.yaml", run_config(m.model, "", 1, false));
  const Outcome o = run_dayzero("run " + (m.dir / "probe.yaml").string() + " --dump-dir " + (m.dir / "probe").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  MergedDump probe;
  if (o.exit_code == 0) merge_rank_files(m.dir / "probe", 1, probe);
  std::map<std::string, std::vector<int32_t>> gen;
  for (const PromptDef& p : kPrompts)
    if (probe.count(std::string("outputs/") + p.id + "/generated_ids"))
      gen[p.id] = probe.at(std::string("outputs/") + p.id + "/generated_ids").ids;
  // The first candidate (a token some prompt generates) under which the prompts stop after
  // different numbers of steps and at least one stops before max_new_tokens.
  for (const auto& [id, ids] : gen) {
    for (int32_t cand : ids) {
      std::map<std::string, size_t> steps;
      std::set<size_t> lengths;
      for (const auto& [pid, pids] : gen) {
        size_t n = pids.size();
        for (size_t i = 0; i < pids.size(); ++i)
          if (pids[i] == cand) {
            n = i + 1;
            break;
          }
        steps[pid] = n;
        lengths.insert(n);
      }
      if (lengths.size() > 1 && *lengths.begin() < static_cast<size_t>(kMaxNewTokens) &&
          *lengths.rbegin() == static_cast<size_t>(kMaxNewTokens)) {
        m.eos = cand;
        m.expected_steps = steps;
        break;
      }
    }
    if (m.eos >= 0) break;
  }
  EXPECT_GE(m.eos, 0) << family << ": no generated token makes one prompt stop early and another run to the end";
  json gc = json::parse(read_file(m.model / "generation_config.json"), nullptr, false);
  if (gc.is_discarded()) gc = json::object();
  gc["eos_token_id"] = m.eos;
  write_file(m.model / "generation_config.json", gc.dump(2));
  return cache.emplace(family, std::move(m)).first->second;
}

// Runs and merges one configuration; fails the test when the run fails.
void run_and_merge(const Plan& plan, const fs::path& config, const fs::path& run_dir, MergedDump& into) {
  const Outcome o = run_plan(plan, config, run_dir);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  ASSERT_NO_FATAL_FAILURE(merge_rank_files(run_dir, plan.ranks, into));
}

class BatchDecode : public ::testing::TestWithParam<std::tuple<const char*, Plan>> {};

TEST_P(BatchDecode, MatchesOneSequenceAtATime) {
  const std::string family = std::get<0>(GetParam());
  const Plan plan = std::get<1>(GetParam());
  const std::string label = family + " " + plan.name;
  const FamilyModel& m = family_model(family);
  ASSERT_FALSE(HasFailure()) << family << ": making the model failed";

  MergedDump one, batch;
  const fs::path c1 = m.dir / (std::string(plan.name) + "-b1.yaml"), cb = m.dir / (std::string(plan.name) + "-b8.yaml");
  write_file(c1, run_config(m.model, plan.parallel, 1, true));
  write_file(cb, run_config(m.model, plan.parallel, 8, true));
  ASSERT_NO_FATAL_FAILURE(run_and_merge(plan, c1, m.dir / (std::string("run-") + plan.name + "-b1"), one)) << label;
  ASSERT_NO_FATAL_FAILURE(run_and_merge(plan, cb, m.dir / (std::string("run-") + plan.name + "-b8"), batch)) << label;

  // The EOS really shortened some sequences, so sequences left the batch while others went on.
  for (const auto& [pid, steps] : m.expected_steps) {
    const std::string key = "outputs/" + pid + "/generated_ids";
    ASSERT_TRUE(batch.count(key)) << label << ": " << key;
    EXPECT_EQ(batch.at(key).ids.size(), steps) << label << ": " << pid << " with eos " << m.eos;
  }

  std::set<std::string> keys_one, keys_batch;
  for (const auto& [k, v] : one) keys_one.insert(k);
  for (const auto& [k, v] : batch) keys_batch.insert(k);
  ASSERT_EQ(keys_one, keys_batch) << label << ": the batched run writes other keys";
  const DumpDiff diff = diff_dumps(one, batch, kRelL2Tol);
  std::ostringstream heading;
  heading << label << ": datasets differ (tolerance " << kRelL2Tol << ")";
  EXPECT_TRUE(diff.mismatches.empty()) << first_lines(heading.str(), diff.mismatches);
  const double worst = diff.worst;
  const std::string& worst_key = diff.worst_key;
  std::printf("[ worst    ] %-18s max_batch 8 vs 1: relative L2 %.3g%s%s\n", label.c_str(), worst,
              worst_key.empty() ? "" : " at ", worst_key.c_str());

  // Negative control: the same check between two prompts of the same length must fail, so the
  // tolerance is not one that anything passes.
  for (const char* point : {"embed", "layers.1.attn_out", "layers.1.layer_out", "logits"}) {
    const std::string a = std::string("activations/mid/prefill/") + point, b = std::string("activations/mid2/prefill/") + point;
    ASSERT_TRUE(batch.count(a) && batch.count(b)) << label << ": " << a;
    ASSERT_EQ(batch.at(a).shape, batch.at(b).shape);
    EXPECT_GT(rel_l2(batch.at(a).values, batch.at(b).values), kRelL2Tol) << label << ": control " << point;
  }
}

std::string case_name(const ::testing::TestParamInfo<BatchDecode::ParamType>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Families, BatchDecode,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe",
                                                              "deepseek_v3"),
                                            ::testing::ValuesIn(kPlans)),
                         case_name);

// The summary attribute's peak_kv_cache_bytes of every rank file, in rank order.
std::vector<int64_t> peak_kv(const fs::path& run_dir, int ranks) {
  std::vector<int64_t> peaks;
  for (int r = 0; r < ranks; ++r) {
    auto reader = dump::DumpReader::open(rank_dump(run_dir, r).string());
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    if (!reader.ok()) return {};
    auto s = reader->attr_string("summary");
    EXPECT_TRUE(s.ok()) << s.status().message();
    const json j = json::parse(s.ok() ? *s : std::string("{}"), nullptr, false);
    peaks.push_back(j.is_object() ? j.value("peak_kv_cache_bytes", int64_t{-1}) : -1);
    // The GEMM paths the rank ran: the built-in small-M kernel this process has too, and the
    // prefill path the run's start-up timing chose (docs/gemm.md, "The prefill path").
    const std::string gemm = j.is_object() ? j.value("gemm", std::string()) : std::string();
    const std::string& mine = kernels::cpu::gemm_info().path;  // "<small-M kernel> at m <= 16; <rule's large-M path>"
    EXPECT_NE(gemm.find(mine.substr(0, mine.find("; "))), std::string::npos)
        << "rank " << r << " summary gemm '" << gemm << "', this process: " << mine;
    EXPECT_NE(gemm.find("; large-M path "), std::string::npos) << "rank " << r << " summary gemm '" << gemm << "'";
  }
  return peaks;
}

// Six prompts, more than max_batch: the runner decodes them in waves, so at most max_batch
// caches are resident, and the plan sized for min(max_batch, prompts) sequences holds them.
TEST(BatchDecodeMemory, PeakKvCacheFollowsMaxBatchAndStaysInThePlan) {
  const FamilyModel& m = family_model("llama");
  ASSERT_FALSE(HasFailure());
  constexpr size_t kPromptCount = 6;
  const Plan tp2 = kPlans[1];
  std::map<int, std::vector<int64_t>> peaks;
  for (int max_batch : {1, 2, 4}) {
    const fs::path config = m.dir / ("memory-b" + std::to_string(max_batch) + ".yaml");
    const fs::path run_dir = m.dir / ("run-memory-b" + std::to_string(max_batch));
    write_file(config, run_config(m.model, tp2.parallel, max_batch, false, kPromptCount));
    const Outcome o = run_plan(tp2, config, run_dir);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    peaks[max_batch] = peak_kv(run_dir, tp2.ranks);
    ASSERT_EQ(peaks[max_batch].size(), static_cast<size_t>(tp2.ranks));
    const json plan = json::parse(read_file(run_dir / "plan.json"), nullptr, false);
    ASSERT_TRUE(plan.contains("memory")) << "plan.json has no memory estimate";
    for (int r = 0; r < tp2.ranks; ++r) {
      const int64_t peak = peaks[max_batch][static_cast<size_t>(r)];
      const int64_t planned = plan.at("memory").at(static_cast<size_t>(r)).at("kv_cache").get<int64_t>();
      std::printf("[ kv cache ] max_batch %d rank %d: peak resident %lld bytes, plan estimate %lld bytes\n", max_batch,
                  r, static_cast<long long>(peak), static_cast<long long>(planned));
      EXPECT_GT(peak, 0) << "rank " << r << " recorded no KV cache";
      // PLANNER DEPENDENCY: holds once the run's plan request asks for
      // PlanRequest.batch = min(generate.max_batch, prompts) sequences. A planner that sizes the
      // KV cache for one sequence fails here for max_batch > 1 (planned 3328 vs 5376 bytes).
      EXPECT_GE(planned, peak) << "max_batch " << max_batch << " rank " << r
                               << ": more KV cache resident than the plan's estimate";
    }
  }
  for (int r = 0; r < tp2.ranks; ++r) {
    EXPECT_LT(peaks[1][static_cast<size_t>(r)], peaks[2][static_cast<size_t>(r)]) << "rank " << r;
    EXPECT_LT(peaks[2][static_cast<size_t>(r)], peaks[4][static_cast<size_t>(r)]) << "rank " << r;
  }
}

}  // namespace
}  // namespace dayzero::e2e
