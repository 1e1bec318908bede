// The identity rules of the baseline library (diag/baseline.h): what must match is reported
// one line per item (model config and shards, dtype, dump and generate settings, prompts), and
// baseline names are checked. Not saving or comparing real runs (tests/e2e/baseline_test.cpp).
#include <gtest/gtest.h>

#include "diag/baseline.h"

namespace dayzero::diag {
namespace {

using nlohmann::ordered_json;

ordered_json identity() {
  return ordered_json::parse(R"({
    "model": {"config_xxh64": "aa", "tensors": 20,
              "files": [{"name": "model-1.safetensors", "bytes": 100, "header_xxh64": "h1"},
                        {"name": "model-2.safetensors", "bytes": 200, "header_xxh64": "h2"}]},
    "dtype": "float32",
    "dump": {"enabled": true, "layers": "all", "points": "all", "phase": "both"},
    "generate": {"max_new_tokens": 4, "stop_at_eos": false, "top_k_record": 5},
    "prompts": [{"id": "capital", "images": [], "tokens": 6, "tokens_xxh64": "t1"},
                {"id": "cat", "images": ["i1"], "tokens": 40, "tokens_xxh64": "t2"}]})");
}

TEST(DiagBaseline, SameIdentityMatches) {
  EXPECT_TRUE(identity_mismatches(identity(), identity(), "the baseline", "the run").empty());
}

TEST(DiagBaseline, EveryItemIsItsOwnLine) {
  ordered_json run = identity();
  run["model"]["files"][1]["bytes"] = 208;
  run["model"]["files"][0]["header_xxh64"] = "other";
  run["dtype"] = "bfloat16";
  run["dump"]["phase"] = "prefill";
  run["generate"]["max_new_tokens"] = 8;
  run["prompts"][0]["tokens_xxh64"] = "t9";
  run["prompts"][1]["images"] = {"i2"};
  const auto lines = identity_mismatches(identity(), run, "the baseline", "the run");
  const std::vector<std::string> want = {
      "model: shard model-1.safetensors: its safetensors header (tensor names, dtypes, shapes, offsets) differs between "
      "the baseline and the run",
      "model: shard model-2.safetensors is 200 bytes in the baseline, 208 in the run",
      "dtype: \"float32\" in the baseline, \"bfloat16\" in the run",
      "dump.activations.phase: \"both\" in the baseline, \"prefill\" in the run",
      "generate.max_new_tokens: 4 in the baseline, 8 in the run",
      "prompt 'capital': its token ids differ (6 tokens in the baseline, 6 in the run)",
      "prompt 'cat': its images differ ([\"i1\"] in the baseline, [\"i2\"] in the run)"};
  EXPECT_EQ(lines, want);
}

TEST(DiagBaseline, ModelAndPromptSets) {
  ordered_json run = identity();
  run["model"]["config_xxh64"] = "bb";
  run["model"]["tensors"] = 22;
  run["model"]["files"].erase(1);
  run["prompts"].erase(0);
  run["prompts"].push_back({{"id", "dog"}, {"images", ordered_json::array()}, {"tokens", 3}, {"tokens_xxh64", "t3"}});
  const auto lines = identity_mismatches(identity(), run, "A", "B");
  const std::vector<std::string> want = {"model: config.json differs (xxh64 \"aa\" in A, \"bb\" in B)",
                                         "model: 20 tensors in A, 22 in B",
                                         "model: shard model-2.safetensors is in A only",
                                         "prompts: only in A: 'capital'",
                                         "prompts: only in B: 'dog'"};
  EXPECT_EQ(lines, want);
}

TEST(DiagBaseline, NamesAndLibrary) {
  EXPECT_TRUE(baseline_dir("lib", "llama-8b_v1.2").ok());
  for (const char* bad : {"", ".hidden", "a/b", "..", "a b"})
    EXPECT_EQ(baseline_dir("lib", bad).status().exit_code(), 2) << bad;
  EXPECT_EQ(baseline_library("given"), "given");
}

}  // namespace
}  // namespace dayzero::diag
