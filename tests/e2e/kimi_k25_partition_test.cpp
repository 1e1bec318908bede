// Partition invariance of image+text prompts on the tiny kimi_k25 with INT4 routed experts
// (MoonViT and projector on the first stage, replicated over tp): one rank, then tp2 with each
// expert split in two (etp 2: the packed words and group scales of down_proj split by columns),
// pp2, ep2 (whole experts spread over two ranks) and tp2 x pp2 on four ranks (the tower on the
// first stage's tp pair, the text layers split over both stages), each against the one dump. The prompts carry the committed example
// images through the Kimi-K2.5 processor: placed at the media placeholder in one prompt, before
// the text of another (no placeholder), two images in a third. Every key of the one-rank run
// (vision points, merged embeddings, text activations, router outputs, logits, generated ids)
// must be written exactly once and agree.
#include <algorithm>
#include <cstdio>

#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

// As llava_partition_test: tp sums partial products in another order than one rank.
constexpr double kRelL2Tol = 1e-5;

std::string run_config(const fs::path& model, const std::string& parallel) {
  const std::string img = std::string(DAYZERO_SOURCE_DIR) + "/configs/images/";
  // 512: the tiny kimi_k25's media_placeholder_token_id, its tokenizer's <|media_pad|>.
  return "model: {path: " + model.string() + ", dtype: float32}\n" +
         (parallel.empty() ? "" : "parallel: " + parallel + "\n") +
         "prompts:\n"
         "  - {id: middle, text: \"The capital of <|media_pad|> France is\", images: [" + img + "pattern.png]}\n"
         "  - {id: before, tokens: [3, 17, 42, 99, 5, 250, 11], images: [" + img + "pattern.png]}\n"
         "  - {id: two, tokens: [3, 512, 17, 512, 42], images: [" + img + "pattern.png, " + img + "grey.png]}\n"
         "  - {id: text, tokens: [3, 17, 42, 99, 5, 250, 11]}\n"
         "generate: {max_new_tokens: 3, stop_at_eos: false}\n"
         "dump:\n"
         "  dir: unused\n"
         "  activations: {layers: all, phase: prefill, mode: full}\n";
}

TEST(KimiK25Partition, ImageAndTextPromptsAgreeUnderEveryPlan) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  same_gemm_paths_in_every_run();
  const fs::path dir = scratch_dir("kimi-partition");
  const fs::path model = dir / "model";
  make_model_from_yaml(golden_sizes("kimi_k25_int4"), model);
  write_file(dir / "ref.yaml", run_config(model, ""));
  const Outcome ref = run_dayzero("run " + (dir / "ref.yaml").string() + " --dump-dir " + (dir / "run-ref").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  MergedDump want;
  ASSERT_NO_FATAL_FAILURE(merge_rank_files(dir / "run-ref", 1, want));
  for (const char* key : {"activations/middle/prefill/vision.embed", "activations/middle/prefill/vision.layers.1.layer_out",
                          "activations/middle/prefill/vision.merged", "activations/middle/prefill/projector_out",
                          "activations/middle/prefill/merged_embed", "activations/middle/prefill/layers.1.topk_ids"})
    EXPECT_TRUE(want.count(key)) << key;
  // pattern.png 128x96 -> padded 140x112: a 10x8 grid, 20 merged rows; grey.png 64x64 -> 84x84:
  // 6x6, 9 rows.
  EXPECT_EQ(want.at("activations/middle/prefill/vision.embed").shape[0], 80);
  // The text's <|media_pad|> tokenizes to the placeholder and expands to the image's 20 rows.
  const auto& middle = want.at("outputs/middle/prompt_ids").ids;
  EXPECT_EQ(std::count(middle.begin(), middle.end(), 512), 20);
  const auto& before = want.at("outputs/before/prompt_ids").ids;
  ASSERT_EQ(before.size(), 7u + 20u);
  EXPECT_EQ(before[19], 512);
  EXPECT_EQ(before[20], 3);
  EXPECT_EQ(want.at("outputs/two/prompt_ids").ids.size(), 3u + 29u);
  EXPECT_EQ(want.at("activations/two/prefill/projector_out").shape[0], 29);
  EXPECT_GT(rel_l2(want.at("outputs/middle/logits_last").values, want.at("outputs/text/logits_last").values), 1e-3);

  struct Plan {
    const char* name;
    int world;
    const char* parallel;
  };
  for (const Plan& p : {Plan{"tp2_etp2", 2, "{tp: 2, ep: 1}"}, Plan{"pp2", 2, "{pp: 2}"}, Plan{"ep2", 2, "{tp: 2, ep: 2}"},
                       Plan{"tp2_pp2", 4, "{tp: 2, pp: 2, ep: 1}"}}) {
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
    EXPECT_EQ(got.at("activations/middle/prefill/projector_out").values,
              want.at("activations/middle/prefill/projector_out").values);
  }
}

}  // namespace
}  // namespace dayzero::e2e
