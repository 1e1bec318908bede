// Partition invariance of image+text prompts: the tiny llava (CLIP tower and projector on the
// first stage, replicated over tp) run on one rank, then under tp2, pp2 and tp2 x pp2, with a
// synthetic image (debug.image_patterns) placed in one prompt's text and put before another's, and two
// images in a third.
// Every key of the one-rank run (vision points, merged embeddings, text activations, logits,
// generated ids) must be written exactly once and agree; two different images give different
// logits_last, the same image twice identical ones.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

// As partition_invariance_test.cpp: tp sums partial products in another order than one rank;
// the tower itself is replicated, so its points are bit-identical (checked below).
constexpr double kRelL2Tol = 2e-6;

std::string run_config(const fs::path& model, const std::string& parallel) {
  // 512: the tiny llava's image_token_index, its tokenizer's <image>.
  return "model: {path: " + model.string() + ", dtype: float32}\n" +
         (parallel.empty() ? "" : "parallel: " + parallel + "\n") +
         "prompts:\n"
         "  - {id: middle, tokens: [3, 17, 42, 512, 99, 5, 250, 11]}\n"
         "  - {id: before, tokens: [3, 17, 42, 99, 5, 250, 11]}\n"
         "  - {id: other, tokens: [3, 17, 42, 512, 99, 5, 250, 11]}\n"
         "  - {id: again, tokens: [3, 17, 42, 512, 99, 5, 250, 11]}\n"
         "  - {id: two, tokens: [3, 512, 17, 512, 42]}\n"
         "generate: {max_new_tokens: 4, stop_at_eos: false}\n"
         "dump:\n"
         "  dir: unused\n"
         "  activations: {layers: all, phase: prefill, mode: full}\n"
         "debug:\n"
         "  image_patterns: [{prompt: middle, seed: 0}, {prompt: before, seed: 0}, {prompt: other, seed: 1},\n"
         "                   {prompt: again, seed: 0}, {prompt: two, seed: 0}, {prompt: two, seed: 1}]\n";
}

TEST(LlavaPartition, ImageAndTextPromptsAgreeUnderEveryPlan) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  same_gemm_paths_in_every_run();
  const fs::path dir = scratch_dir("llava-partition");
  const fs::path model = dir / "model";
  make_model_from_yaml(golden_sizes("llava"), model, "--dtype float32");
  write_file(dir / "ref.yaml", run_config(model, ""));
  const Outcome ref = run_dayzero("run " + (dir / "ref.yaml").string() + " --dump-dir " + (dir / "run-ref").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  MergedDump want;
  ASSERT_NO_FATAL_FAILURE(merge_rank_files(dir / "run-ref", 1, want));
  for (const char* key : {"activations/middle/prefill/vision.embed", "activations/middle/prefill/vision.layers.0.layer_out",
                          "activations/middle/prefill/vision.selected", "activations/middle/prefill/projector_out",
                          "activations/middle/prefill/merged_embed", "outputs/before/prompt_ids"})
    EXPECT_TRUE(want.count(key)) << key;
  // 8 tokens with one placeholder -> 7 + 9 image rows; before: the 9 rows lead.
  EXPECT_EQ(want.at("outputs/middle/prompt_ids").ids.size(), 16u);
  const auto& before = want.at("outputs/before/prompt_ids").ids;
  ASSERT_EQ(before.size(), 16u);
  EXPECT_EQ(before[0], 512);
  EXPECT_EQ(before[8], 512);
  EXPECT_EQ(before[9], 3);
  // Two images in one prompt: their vision points stacked in order (10 tower rows each, CLS
  // included; 9 feature rows each), the first image's rows as the one-image prompt's.
  EXPECT_EQ(want.at("outputs/two/prompt_ids").ids.size(), 3u + 18u);
  const auto& two_embed = want.at("activations/two/prefill/vision.embed");
  EXPECT_EQ(two_embed.shape[0], 20);
  EXPECT_EQ(want.at("activations/two/prefill/projector_out").shape[0], 18);
  const auto& one_embed = want.at("activations/middle/prefill/vision.embed").values;
  EXPECT_TRUE(std::equal(one_embed.begin(), one_embed.end(), two_embed.values.begin()));
  const auto& la = want.at("outputs/middle/logits_last").values;
  EXPECT_EQ(la, want.at("outputs/again/logits_last").values);
  EXPECT_GT(rel_l2(la, want.at("outputs/other/logits_last").values), 1e-3);

  struct Plan {
    const char* name;
    int world;
    const char* parallel;
  };
  for (const Plan& p : {Plan{"tp2", 2, "{tp: 2}"}, Plan{"pp2", 2, "{pp: 2}"}, Plan{"tp2_pp2", 4, "{tp: 2, pp: 2}"}}) {
    SCOPED_TRACE(p.name);
    const fs::path yaml = dir / (std::string(p.name) + ".yaml");
    write_file(yaml, run_config(model, p.parallel));
    const fs::path run = dir / (std::string("run-") + p.name);
    const Outcome o = run_dayzero_mpi(p.world, "run " + yaml.string() + " --dump-dir " + run.string());
    ASSERT_EQ(o.exit_code, 0) << o.output;
    MergedDump got;
    ASSERT_NO_FATAL_FAILURE(merge_rank_files(run, p.world, got));
    EXPECT_EQ(got.size(), want.size());
    const DumpDiff d = diff_dumps(want, got, kRelL2Tol);
    for (const auto& m : d.mismatches) ADD_FAILURE() << m;
    std::printf("%s: worst rel_l2 %.3g (%s)\n", p.name, d.worst, d.worst_key.c_str());
    // The replicated tower: its points equal the one-rank run's bit for bit.
    EXPECT_EQ(got.at("activations/middle/prefill/projector_out").values,
              want.at("activations/middle/prefill/projector_out").values);
  }
}

}  // namespace
}  // namespace dayzero::e2e
