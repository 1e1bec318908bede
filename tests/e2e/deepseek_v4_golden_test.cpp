// `dayzero run` of the tiny deepseek_v4 (tests/data/golden/deepseek_v4.yaml: published tensor
// names, layers sliding / CSA / HCA / CSA, layer 0 hash-routed, 2 residual streams) against
// transformers 5.25 (tests/data/golden/deepseek_v4.safetensors, tools/make_hf_goldens.py): the
// embedding, every layer's residual streams (layer_out, [n, hc_mult * n_embd]) and the final
// norm over the 40-token prompt (longer than the window of 8, a CSA block of 4 and an HCA block
// of 8), the last prompt logits, the 8 greedy tokens, and the logits of the decode steps, which
// run one token each through the window, compressor and indexer state the prompt left (entries
// close at 44 and 48 tokens) and are held against transformers' cached decode, and layer 1's
// indexer picks, prompt and decode rows, equal transformers'. Negative
// controls: the same run with one config key wrong (Sinkhorn at 1 iteration, compress_rope_theta
// = rope_theta, softmax instead of sqrtsoftplus scores) fails the tolerance and lands on
// transformers run with the same bug. The blocks alone: tests/unit/model/v4_*_test.cpp.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>

#include "dump/dump_reader.h"
#include "e2e_util.h"
#include "golden_util.h"

namespace dayzero::e2e {
namespace {

// Measured on an AMD EPYC Zen 4 (avx512, every kernel path alike): layer outputs 3.1e-7 to
// 6.2e-7, final_norm 6.2e-7, last logits 7.6e-7, the decode steps' logits 4.5e-7 to 7.9e-7.
// The controls' logits are off by 2e-2 and more.
constexpr double kTol = 1.5e-6;

const Golden& golden() {
  static const Golden g = read_golden(golden_sizes("deepseek_v4").replace_extension(".safetensors"));
  return g;
}

fs::path model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("deepseek-v4-golden") / "model";
    make_model_from_yaml(golden_sizes("deepseek_v4"), d);
    return d;
  }();
  return dir;
}

// A copy of the model with config.json edited by f.
fs::path edited_model(const std::string& name, const std::function<void(nlohmann::json&)>& f) {
  const fs::path to = scratch_dir("deepseek-v4-golden-" + name) / "model";
  fs::remove_all(to);
  fs::copy(model_dir(), to, fs::copy_options::recursive);
  auto cfg = nlohmann::json::parse(read_file(to / "config.json"));
  f(cfg);
  write_file(to / "config.json", cfg.dump(2));
  return to;
}

// Runs the golden prompt with 8 greedy tokens; the rank file.
fs::path run_golden(const fs::path& model, const std::string& tag) {
  std::string ids;
  for (float v : golden().t.at("prompt_ids")) ids += (ids.empty() ? "" : ", ") + std::to_string(static_cast<int>(v));
  const fs::path dir = scratch_dir("deepseek-v4-golden-run-" + tag);
  write_file(dir / "run.yaml", "model: {path: " + model.string() + ", dtype: float32}\n"
                               "prompts:\n  - {id: golden, tokens: [" + ids + "]}\n"
                               "generate: {max_new_tokens: 8, stop_at_eos: false}\n"
                               "dump:\n  dir: " + (dir / "run").string() + "\n"
                               "  activations: {layers: all, points: [embed, layer_out, final_norm, logits, index_topk_ids], "
                               "phase: both}\n");
  const Outcome o = run_dayzero("run " + (dir / "run.yaml").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  return rank0_dump(dir / "run");
}

std::vector<float> prefill(const dump::DumpReader& r, const std::string& name) {
  auto a = r.read_activation("golden", "prefill", name);
  EXPECT_TRUE(a.ok()) << name << ": " << a.status().message();
  return a.ok() ? a->data : std::vector<float>{};
}

std::vector<float> last_logits(const dump::DumpReader& r) {
  auto out = r.read_output("golden");
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->logits_last : std::vector<float>{};
}

TEST(DeepseekV4Golden, PrefillAndCachedDecodeMatchTransformers) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  const Golden& g = golden();
  auto r = dump::DumpReader::open(run_golden(model_dir(), "reference").string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> keys = {"embed", "final_norm"};
  for (int l = 0; l < 4; ++l) keys.push_back("layers." + std::to_string(l) + ".layer_out");
  for (const std::string& k : keys) {
    const std::vector<float> ours = prefill(*r, k);
    ASSERT_EQ(ours.size(), g.t.at(k).size()) << k;
    const double e = rel_l2(g.t.at(k), ours);
    EXPECT_LT(e, kTol) << k;
    std::printf("%-20s relative L2 %.2e\n", k.c_str(), e);
  }
  const double e_last = rel_l2(g.t.at("logits_last"), last_logits(*r));
  EXPECT_LT(e_last, kTol);
  std::printf("%-20s relative L2 %.2e\n", "logits_last", e_last);

  auto out = r->read_output("golden");
  ASSERT_TRUE(out.ok()) << out.status().message();
  const std::vector<float>& greedy = g.t.at("greedy_ids");
  ASSERT_EQ(out->generated_ids.size(), greedy.size());
  for (size_t j = 0; j < greedy.size(); ++j) EXPECT_EQ(out->generated_ids[j], static_cast<int32_t>(greedy[j])) << j;

  // Decode step j (the token after greedy token j) against transformers' cached decode.
  auto dec = r->read_activation("golden", "decode", "logits");
  ASSERT_TRUE(dec.ok()) << dec.status().message();
  const std::vector<float>& want = g.t.at("decode_logits");
  const auto vocab = static_cast<size_t>(g.shape.at("decode_logits")[1]);
  const size_t steps = dec->data.size() / vocab;
  ASSERT_EQ(steps, greedy.size() - 1);  // the last generated token is not run
  double worst = 0;
  for (size_t j = 0; j < steps; ++j) {
    const std::vector<float> ours(dec->data.begin() + j * vocab, dec->data.begin() + (j + 1) * vocab);
    const std::vector<float> theirs(want.begin() + j * vocab, want.begin() + (j + 1) * vocab);
    worst = std::max(worst, rel_l2(theirs, ours));
  }
  EXPECT_LT(worst, kTol);
  std::printf("decode logits (%zu steps): worst relative L2 %.2e\n", steps, worst);

  // Layer 1's lightning indexer (CSA): the compressed entries each query picked, prompt rows then
  // decode rows, equal to transformers' (ascending, -1 for none).
  const std::vector<float> picked_prefill = prefill(*r, "layers.1.index_topk_ids");
  auto picked_decode = r->read_activation("golden", "decode", "layers.1.index_topk_ids");
  ASSERT_TRUE(picked_decode.ok()) << picked_decode.status().message();
  std::vector<float> picked = picked_prefill;
  picked.insert(picked.end(), picked_decode->data.begin(), picked_decode->data.end());
  const std::vector<float>& want_picks = g.t.at("cmp.indexer.picks");
  ASSERT_LE(picked.size(), want_picks.size());
  int64_t differ = 0;
  for (size_t i = 0; i < picked.size(); ++i) differ += picked[i] != want_picks[i];
  EXPECT_EQ(differ, 0) << "of " << picked.size() << " picks";
  std::printf("layers.1.index_topk_ids: %zu picks of %zu rows, %lld differ\n", picked.size(), picked.size() / 4,
              static_cast<long long>(differ));
}

TEST(DeepseekV4Golden, WrongConfigsFailTheToleranceAndMatchTransformersWithTheSameBug) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  const std::pair<const char*, std::function<void(nlohmann::json&)>> cases[] = {
      {"sinkhorn_1", [](nlohmann::json& c) { c["hc_sinkhorn_iters"] = 1; }},
      {"compress_theta_main", [](nlohmann::json& c) { c["compress_rope_theta"] = c["rope_theta"]; }},
      {"softmax_scores", [](nlohmann::json& c) { c["scoring_func"] = "softmax"; }},
  };
  for (const auto& [name, edit] : cases) {
    auto r = dump::DumpReader::open(run_golden(edited_model(name, edit), name).string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    const std::vector<float> ours = last_logits(*r);
    const double e = rel_l2(golden().t.at("logits_last"), ours);
    const double e_same_bug = rel_l2(golden().t.at(std::string("control.") + name + ".logits_last"), ours);
    EXPECT_GT(e, kTol) << name;
    EXPECT_LT(e_same_bug, kTol) << name << ": transformers with the same bug";
    std::printf("%-20s logits relative L2 %.2e to the golden, %.2e to transformers with the same bug\n", name, e,
                e_same_bug);
    if (std::string(name) == "compress_theta_main") {  // the indexer's keys rotate otherwise: other picks
      const std::vector<float> picked = prefill(*r, "layers.1.index_topk_ids");
      int64_t differ = 0;
      for (size_t i = 0; i < picked.size(); ++i) differ += picked[i] != golden().t.at("cmp.indexer.picks")[i];
      EXPECT_GT(differ, 0) << name << ": the indexer's picks did not change";
      std::printf("%-20s layers.1.index_topk_ids: %lld of %zu prompt picks differ\n", name,
                  static_cast<long long>(differ), picked.size());
    }
  }
}

}  // namespace
}  // namespace dayzero::e2e
