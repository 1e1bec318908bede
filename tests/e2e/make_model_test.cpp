// dayzero make-model as a user runs it: every registered family without size flags makes a
// folder that `dayzero run` accepts (or, for a family whose forward pass is not built yet,
// refuses by name with exit 2); --help lists every family; a failed make-model leaves no
// folder behind and an existing folder that is not a model is never replaced.
#include "e2e_util.h"
#include "model/registry.h"

namespace dayzero::e2e {
namespace {

TEST(MakeModel, EveryFamilyWithoutSizeFlagsRuns) {
  const fs::path dir = scratch_dir("make-model-families");
  for (const std::string& family : model::supported_families()) {
    SCOPED_TRACE(family);
    const fs::path out = dir / family;
    const Outcome made = run_dayzero("make-model --arch " + family + " --out " + out.string());
    ASSERT_EQ(made.exit_code, 0) << made.output;
    // A family that takes images also gets its processor's settings.
    if (family == "llava") {
      EXPECT_TRUE(fs::exists(out / "preprocessor_config.json"));
    }
    const fs::path cfg = dir / (family + ".yaml");
    write_file(cfg, "model: {path: " + out.string() + "}\n"
                    "prompts: [{id: p, text: \"The capital of France is\"}]\n"
                    "generate: {max_new_tokens: 2}\n"
                    "dump: {dir: " + (dir / ("run-" + family)).string() + "}\n");
    const Outcome ran = run_dayzero("run " + cfg.string());
    // A family the forward pass cannot run yet (deepseek_v4) is refused as bad input, by name,
    // before any weight is read; every other family runs.
    const model::Adapter* a = *model::find_adapter_by_family(family);
    model::ModelShape shape;
    a->fill_tiny_defaults(shape);
    auto hp = a->parse_hparams(a->make_config(shape));
    ASSERT_TRUE(hp.ok()) << hp.status().message();
    if (!a->forward_support(*hp).ok()) {
      EXPECT_EQ(ran.exit_code, 2) << ran.output;
      EXPECT_NE(ran.output.find(family + ": this build reads, inspects and plans"), std::string::npos) << ran.output;
      continue;
    }
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    EXPECT_TRUE(fs::exists(rank0_dump(dir / ("run-" + family)))) << ran.output;
  }
}

TEST(MakeModel, HelpListsEveryFamily) {
  const Outcome o = run_dayzero("make-model --help");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (const std::string& family : model::supported_families())
    EXPECT_NE(o.output.find(family), std::string::npos) << family << " missing from\n" << o.output;
}

TEST(MakeModel, FailureLeavesNothingBehind) {
  const fs::path dir = scratch_dir("make-model-failure");
  // 3 heads over 2 kv heads: refused once the config is built, after the tokenizer was written.
  const Outcome o = run_dayzero("make-model --arch llama --n-head 3 --out " + (dir / "m").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("num_key_value_heads"), std::string::npos) << o.output;
  EXPECT_TRUE(fs::is_empty(dir)) << "left behind: " << fs::directory_iterator(dir)->path();

  // A model folder is replaced whole; a folder that is not a model is refused untouched.
  ASSERT_EQ(run_dayzero("make-model --arch qwen3 --out " + (dir / "m").string()).exit_code, 0);
  write_file(dir / "m" / "stale.txt", "from before");
  ASSERT_EQ(run_dayzero("make-model --arch llama --out " + (dir / "m").string()).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "m" / "stale.txt"));
  EXPECT_NE(read_file(dir / "m" / "config.json").find("\"llama\""), std::string::npos);
  fs::create_directories(dir / "notes");
  write_file(dir / "notes" / "keep.txt", "mine");
  const Outcome refused = run_dayzero("make-model --arch llama --out " + (dir / "notes").string());
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(read_file(dir / "notes" / "keep.txt"), "mine");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2) << "only m/ and notes/";
}

}  // namespace
}  // namespace dayzero::e2e
