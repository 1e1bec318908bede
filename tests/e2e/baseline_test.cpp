// The baseline library end to end: a one-rank run of a tiny llama saved as a baseline (full and
// stats); a tp2 x pp2 rerun compares against it and passes, a debug.perturb run fails it with
// the perturbed layer blamed; a run of another model, other prompts and other dump settings is
// refused item by item (exit 2), as is a baseline whose recorded dtype differs; saving from a
// failed run (a failed expect, a phase error, a run without checklist.json) is refused with the
// library untouched; saving a name again says what changed. Not the identity rules' unit test
// (tests/unit/diag/baseline_test.cpp).
#include <nlohmann/json.hpp>

#include <map>

#include "compare_util.h"
#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kLayers = 4;

std::string sizes(int n_ff) {
  return "family: llama\nn_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) +
         "\nn_head: 4\nn_head_kv: 2\nn_ff: " + std::to_string(n_ff) + "\nseed: 23\n";
}

const char* const kPrompts =
    "prompts:\n"
    "  - {id: capital, text: \"The capital of France is\"}\n"
    "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n";

struct Bed {
  fs::path dir, model, other_model, library;
};

Bed& bed() {
  static Bed b = [] {
    Bed x;
    x.dir = scratch_dir("baseline");
    x.model = x.dir / "model";
    x.other_model = x.dir / "model-ff96";
    x.library = x.dir / "library";
    write_file(x.dir / "sizes.yaml", sizes(128));
    write_file(x.dir / "sizes96.yaml", sizes(96));
    make_model_from_yaml(x.dir / "sizes.yaml", x.model, "--dtype float32");
    make_model_from_yaml(x.dir / "sizes96.yaml", x.other_model, "--dtype float32");
    return x;
  }();
  return b;
}

std::string config(const fs::path& model, const std::string& extra, const std::string& prompts = kPrompts,
                   const std::string& activations = "{layers: all, phase: both, mode: full}") {
  return "model: {path: " + model.string() + "}\n" + extra + prompts +
         "generate: {max_new_tokens: 4, stop_at_eos: false}\n"
         "dump:\n  dir: unused\n  activations: " + activations + "\n";
}

// Runs the config text as `label` (once per test binary) on `ranks` ranks; the run folder.
struct Ran {
  fs::path dir;
  Outcome o;
};
const Ran& run(const std::string& label, int ranks, const std::string& text) {
  static std::map<std::string, Ran> cache;
  if (auto it = cache.find(label); it != cache.end()) return it->second;
  const fs::path cfg = bed().dir / (label + ".yaml"), out = bed().dir / ("run-" + label);
  write_file(cfg, text);
  const std::string args = "run " + cfg.string() + " --dump-dir " + out.string();
  Ran r{out, ranks == 1 ? run_dayzero(args) : run_dayzero_mpi(ranks, args)};
  return cache.emplace(label, std::move(r)).first->second;
}

const Ran& ref() { return run("ref", 1, config(bed().model, "")); }
const Ran& tp2pp2() { return run("tp2pp2", 4, config(bed().model, "parallel: {pp: 2, tp: 2}\n")); }

std::string lib_flag(const fs::path& lib) { return " --library " + lib.string(); }

Outcome save(const fs::path& run_dir, const std::string& name, const std::string& flags = "") {
  return run_dayzero("baseline save " + run_dir.string() + " --name " + name + lib_flag(bed().library) + " " + flags);
}

Outcome compare_baseline(const fs::path& run_dir, const std::string& name, const fs::path& lib = bed().library,
                         const std::string& flags = "") {
  return run_dayzero("compare " + run_dir.string() + " --baseline " + name + lib_flag(lib) + " " + flags);
}

// The full and stats baselines of the reference run, saved once.
void saved() {
  static bool done = false;
  if (done) return;
  ASSERT_EQ(ref().o.exit_code, 0) << ref().o.output;
  Outcome o = save(ref().dir, "llama");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("saved baseline 'llama'"), std::string::npos) << o.output;
  o = save(ref().dir, "llama-stats", "--activations stats");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  done = true;
}

TEST(Baseline, RerunUnderAnotherPlanPassesAgainstFullAndStats) {
  ASSERT_NO_FATAL_FAILURE(saved());
  ASSERT_EQ(tp2pp2().o.exit_code, 0) << tp2pp2().o.output;
  for (const char* name : {"llama", "llama-stats"}) {
    const Outcome o = compare_baseline(tp2pp2().dir, name);
    EXPECT_EQ(o.exit_code, 0) << name << "\n" << o.output;
    EXPECT_NE(o.output.find("PASS"), std::string::npos) << o.output;
  }
  // The comparison is not vacuous: the plans differ in the last bits (compare_test measures ~7e-7).
  const Compared c = compare(bed().library / "llama", tp2pp2().dir);
  ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
  EXPECT_GT(worst_error(c.j), 0.0);
  EXPECT_LT(worst_error(c.j), 4e-6);
  // The stored files: one complete rank file holding every key of the run, stats where asked.
  auto full = dump::DumpReader::open(rank0_dump(bed().library / "llama").string());
  auto stats = dump::DumpReader::open(rank0_dump(bed().library / "llama-stats").string());
  ASSERT_TRUE(full.ok() && stats.ok());
  EXPECT_TRUE(full->complete().value());
  EXPECT_FALSE(full->is_stats("capital", "prefill", "layers.2.ffn_out"));
  EXPECT_TRUE(stats->is_stats("capital", "prefill", "layers.2.ffn_out"));
  EXPECT_TRUE(stats->is_stats("raw", "decode", "layers.3.layer_out"));
  auto out = stats->read_output("raw");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->generated_ids.size(), 4u);
  for (const char* f : {"baseline.json", "config.yaml", "plan.json", "identity.json", "checklist.json"})
    EXPECT_TRUE(fs::exists(bed().library / "llama" / f)) << f;
  // list and show name what is stored.
  Outcome o = run_dayzero("baseline list" + lib_flag(bed().library));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("llama-stats"), std::string::npos) << o.output;
  o = run_dayzero("baseline show llama --json" + lib_flag(bed().library));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json b = json::parse(o.output);
  EXPECT_EQ(b.at("identity").at("dtype"), "float32");
  EXPECT_EQ(b.at("identity").at("prompts").size(), 2u);
  EXPECT_EQ(b.at("recorded").at("world_size"), 1);
  EXPECT_EQ(b.at("activations"), "full");
  // The library also comes from the environment.
  o = run_shell("DAYZERO_BASELINE_LIBRARY=" + bed().library.string() + " " + dayzero_bin() + " compare " +
                tp2pp2().dir.string() + " --baseline llama");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(compare_baseline(tp2pp2().dir, "nope").exit_code, 2);
}

TEST(Baseline, PerturbedRunFailsNamingTheLayer) {
  ASSERT_NO_FATAL_FAILURE(saved());
  const Ran& p = run("perturb", 1, config(bed().model, "debug: {perturb: {point: layers.2.ffn_out, scale: 1.001}}\n"));
  ASSERT_EQ(p.o.exit_code, 0) << p.o.output;
  for (const char* name : {"llama", "llama-stats"}) {
    const Outcome o = compare_baseline(p.dir, name);
    EXPECT_EQ(o.exit_code, 1) << name << "\n" << o.output;
    EXPECT_NE(o.output.find("blamed layers.2 at layers.2.ffn_out"), std::string::npos) << name << "\n" << o.output;
  }
}

TEST(Baseline, OtherModelPromptsAndDumpAreRefusedItemByItem) {
  ASSERT_NO_FATAL_FAILURE(saved());
  const std::string prompts =
      "prompts:\n"
      "  - {id: capital, text: \"The capital of Italy is\"}\n"
      "  - {id: extra, tokens: [1, 2, 3]}\n";
  const Ran& other = run("other", 1, config(bed().other_model, "", prompts, "{layers: all, points: [layer_out], phase: both}"));
  ASSERT_EQ(other.o.exit_code, 0) << other.o.output;
  const Outcome o = compare_baseline(other.dir, "llama");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  for (const char* line : {"model: config.json differs", "model: shard model.safetensors is ",
                           "prompts: only in the baseline: 'raw'", "prompts: only in the run: 'extra'",
                           "prompt 'capital': its token ids differ", "dump.activations.points: \"all\" in the baseline, "
                           "[\"layer_out\"] in the run"})
    EXPECT_NE(o.output.find(line), std::string::npos) << line << "\n" << o.output;
  EXPECT_NE(o.output.find("in 6 item(s)"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("dtype"), std::string::npos) << o.output;

  // dtype: the CPU backend computes in float32 only, so the baseline's record is what differs.
  const fs::path lib2 = bed().dir / "library-bf16";
  fs::remove_all(lib2);
  fs::create_directories(lib2);
  fs::copy(bed().library / "llama", lib2 / "llama", fs::copy_options::recursive);
  json b = json::parse(read_file(lib2 / "llama" / "baseline.json"));
  b["identity"]["dtype"] = "bfloat16";
  write_file(lib2 / "llama" / "baseline.json", b.dump(2));
  const Outcome d = compare_baseline(tp2pp2().dir, "llama", lib2);
  EXPECT_EQ(d.exit_code, 2) << d.output;
  EXPECT_NE(d.output.find("in 1 item(s):\n  dtype: \"bfloat16\" in the baseline, \"float32\" in the run"), std::string::npos)
      << d.output;
}

TEST(Baseline, SavingFromARunThatDidNotPassIsRefused) {
  ASSERT_NO_FATAL_FAILURE(saved());
  const std::string expect_prompts =
      "prompts:\n  - {id: capital, text: \"The capital of France is\", expect: {contains: \"zzzz-not-there\"}}\n";
  const Ran& failed = run("failed-expect", 1, config(bed().model, "", expect_prompts));
  ASSERT_EQ(failed.o.exit_code, 1) << failed.o.output;
  Outcome o = save(failed.dir, "refused");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the run ended with exit code 1 (checklist failed: prompts' expectations hold)"),
            std::string::npos)
      << o.output;
  // A phase error after the run folder was made: the record names the phase.
  const Ran& phase = run("failed-phase", 1, config(bed().model, "debug: {perturb: {point: layers.9.ffn_out, scale: 2}}\n"));
  ASSERT_EQ(phase.o.exit_code, 2) << phase.o.output;
  o = save(phase.dir, "refused");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the run stopped in phase 'prompts' with exit code 2"), std::string::npos) << o.output;
  // A folder without the record (a killed run leaves none).
  const fs::path killed = bed().dir / "run-killed";
  fs::remove_all(killed);
  fs::copy(ref().dir, killed, fs::copy_options::recursive);
  fs::remove(killed / "checklist.json");
  o = save(killed, "refused");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("no checklist.json"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(bed().library / "refused"));
  // Nor may a failed run replace a baseline: the old one stays.
  o = save(failed.dir, "llama");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(read_file(bed().library / "llama" / "baseline.json").find(ref().dir.filename().string()), std::string::npos);
}

TEST(Baseline, SavingANameAgainSaysWhatChanged) {
  ASSERT_NO_FATAL_FAILURE(saved());
  Outcome o = save(ref().dir, "replace-me");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  o = save(ref().dir, "replace-me");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("replaced baseline 'replace-me'"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("unchanged: identity, plan"), std::string::npos) << "the same run again\n" << o.output;
  ASSERT_EQ(tp2pp2().o.exit_code, 0) << tp2pp2().o.output;
  o = save(tp2pp2().dir, "replace-me", "--activations stats");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  for (const char* line : {"changed: world_size: 1 -> 4", "changed: plan: ", "changed: activations: \"full\" -> \"stats\"",
                           "changed: source_run: "})
    EXPECT_NE(o.output.find(line), std::string::npos) << line << "\n" << o.output;
  EXPECT_EQ(o.output.find("generated tokens changed"), std::string::npos) << o.output;
  EXPECT_EQ(compare_baseline(ref().dir, "replace-me").exit_code, 0);
}

}  // namespace
}  // namespace dayzero::e2e
