// The Day-0 checklist at the end of `dayzero run`, end to end: checklist.json parses and holds
// every line; a run under a memory cap it exceeds fails the memory line by name and exits 1;
// --repeat 3 passes the reproducibility line, and a perturbation of the second repetition only
// fails it (exit 1) while the dumped first repetition stays the unperturbed run; an image+text
// prompt on a tiny llava runs the image lines; unknown checklist keys and a repetition past
// --repeat are refused. Not the checker's unit test (tests/unit/diag/checklist_test.cpp).
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

const char* const kKeys[] = {"weights",       "peak_memory", "first_token_text", "first_token_image",
                             "image_prompts", "repeat",      "expect"};

struct Bed {
  fs::path dir, llama, llava;
};

Bed& bed() {
  static Bed b = [] {
    Bed x;
    x.dir = scratch_dir("checklist");
    x.llama = x.dir / "llama";
    x.llava = x.dir / "llava";
    make_model_from_yaml(golden_sizes("llama"), x.llama, "--dtype float32");
    make_model_from_yaml(golden_sizes("llava"), x.llava, "--dtype float32");
    return x;
  }();
  return b;
}

std::string config(const fs::path& model, const std::string& extra) {
  return "model: {path: " + model.string() + "}\n" + extra +
         "prompts:\n"
         "  - {id: capital, text: \"The capital of France is\"}\n"
         "  - {id: raw, tokens: [3, 17, 42, 99, 5]}\n"
         "generate: {max_new_tokens: 4, stop_at_eos: false}\n"
         "dump:\n  dir: unused\n  activations: {layers: all, phase: both}\n";
}

struct Ran {
  fs::path dir;
  Outcome o;
  json checklist;  // null when the run wrote none
};

Ran run(const std::string& label, const std::string& text, const std::string& flags = "") {
  Ran r;
  const fs::path cfg = bed().dir / (label + ".yaml");
  r.dir = bed().dir / ("run-" + label);
  write_file(cfg, text);
  r.o = run_dayzero("run " + cfg.string() + " --dump-dir " + r.dir.string() + " " + flags);
  if (fs::exists(r.dir / "checklist.json")) r.checklist = json::parse(read_file(r.dir / "checklist.json"));
  return r;
}

std::map<std::string, json> lines(const json& c) {
  std::map<std::string, json> m;
  for (const json& l : c.at("lines")) m[l.at("key").get<std::string>()] = l;
  return m;
}

// Every line present once, each with a status of pass, fail or not run, a title and a detail.
void expect_well_formed(const json& c) {
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c.at("schema_version"), 1);
  EXPECT_EQ(c.at("complete"), true);
  ASSERT_EQ(c.at("lines").size(), std::size(kKeys));
  const auto m = lines(c);
  for (const char* k : kKeys) {
    ASSERT_TRUE(m.count(k)) << k;
    const std::string s = m.at(k).at("status");
    EXPECT_TRUE(s == "pass" || s == "fail" || s == "not run") << k << ": " << s;
    EXPECT_FALSE(m.at(k).at("title").get<std::string>().empty()) << k;
    EXPECT_FALSE(m.at(k).at("detail").get<std::string>().empty()) << k;
  }
}

TEST(Checklist, RepeatThreeTimesPassesAndTheFileHasEveryLine) {
  const Ran r = run("repeat3", config(bed().llama, ""), "--repeat 3");
  ASSERT_EQ(r.o.exit_code, 0) << r.o.output;
  ASSERT_NO_FATAL_FAILURE(expect_well_formed(r.checklist));
  EXPECT_EQ(r.checklist.at("exit_code"), 0);
  EXPECT_EQ(r.checklist.at("repeat"), 3);
  const auto m = lines(r.checklist);
  EXPECT_EQ(m.at("repeat").at("status"), "pass") << m.at("repeat").dump();
  EXPECT_NE(m.at("repeat").at("detail").get<std::string>().find("2 prompt(s) x 3 repetitions"), std::string::npos);
  EXPECT_EQ(m.at("weights").at("status"), "pass");
  EXPECT_EQ(m.at("peak_memory").at("status"), "pass");
  EXPECT_EQ(m.at("first_token_text").at("status"), "pass");
  EXPECT_EQ(m.at("first_token_image").at("status"), "not run");
  EXPECT_EQ(m.at("image_prompts").at("status"), "not run");
  EXPECT_EQ(m.at("expect").at("status"), "not run");
  EXPECT_NE(r.o.output.find("Day-0 checklist:"), std::string::npos) << r.o.output;
  EXPECT_NE(r.o.output.find("checklist: PASS"), std::string::npos) << r.o.output;
}

TEST(Checklist, PerturbingTheSecondRepetitionFailsReproducibility) {
  const Ran r = run("repeat-perturbed",
                    config(bed().llama, "debug: {perturb: {point: layers.1.ffn_out, scale: 1.0001, repetition: 2}}\n"),
                    "--repeat 2");
  ASSERT_EQ(r.o.exit_code, 1) << r.o.output;
  ASSERT_NO_FATAL_FAILURE(expect_well_formed(r.checklist));
  EXPECT_EQ(r.checklist.at("exit_code"), 1);
  const auto m = lines(r.checklist);
  EXPECT_EQ(m.at("repeat").at("status"), "fail");
  const std::string detail = m.at("repeat").at("detail");
  EXPECT_NE(detail.find("'capital' repetition 2: "), std::string::npos) << detail;
  EXPECT_NE(detail.find("'raw' repetition 2: "), std::string::npos) << detail;
  EXPECT_NE(r.o.output.find("checklist: repeated runs give identical outputs failed"), std::string::npos) << r.o.output;
  // The first repetition is the dumped run, and it was not perturbed.
  const Ran plain = run("plain", config(bed().llama, ""));
  ASSERT_EQ(plain.o.exit_code, 0) << plain.o.output;
  EXPECT_EQ(lines(plain.checklist).at("repeat").at("status"), "not run");
  const Outcome c = run_dayzero("compare " + plain.dir.string() + " " + r.dir.string());
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST(Checklist, MemoryCapExceededFailsThatLineByName) {
  // 0.02 GiB x memory_fraction 0.5 = 10 MiB: more than the plan of a tiny model needs with a
  // 1 MiB headroom, less than the process's resident memory (~50 MiB).
  const Ran r = run("memcap", config(bed().llama, "topology: {device_memory_gib: 0.02, memory_fraction: 0.5}\n"
                                                  "runtime: {headroom_mib: 1}\n"));
  ASSERT_EQ(r.o.exit_code, 1) << r.o.output;
  ASSERT_NO_FATAL_FAILURE(expect_well_formed(r.checklist));
  const auto m = lines(r.checklist);
  EXPECT_EQ(m.at("peak_memory").at("status"), "fail");
  const std::string detail = m.at("peak_memory").at("detail");
  EXPECT_NE(detail.find("worst rank 0 ("), std::string::npos) << detail;
  EXPECT_NE(detail.find("of its cap 10.2 MiB"), std::string::npos) << detail;
  EXPECT_NE(m.at("peak_memory").at("title").get<std::string>().find("memory_fraction 0.5"), std::string::npos);
  for (const char* k : {"weights", "first_token_text"}) EXPECT_EQ(m.at(k).at("status"), "pass") << k;
  const std::string error = r.o.output.substr(r.o.output.find("dayzero: error:"));
  EXPECT_NE(error.find("checklist: peak memory per rank under memory_fraction 0.5 of the device failed: worst rank 0"),
            std::string::npos)
      << r.o.output;
}

TEST(Checklist, ImagePromptRunsTheImageLinesAndLimitsAreConfigurable) {
  const std::string text = "model: {path: " + bed().llava.string() + "}\n" +
                           "checklist: {first_token_text_s: 20, first_token_image_s: 40}\n"
                           "prompts:\n"
                           "  - {id: look, text: \"What is this?\"}\n"
                           "  - {id: plain, text: \"Hello\"}\n"
                           "debug: {image_patterns: [{prompt: look, seed: 3}]}\n"
                           "generate: {max_new_tokens: 2}\n";
  const Ran r = run("image", text);
  ASSERT_EQ(r.o.exit_code, 0) << r.o.output;
  ASSERT_NO_FATAL_FAILURE(expect_well_formed(r.checklist));
  const auto m = lines(r.checklist);
  EXPECT_EQ(m.at("first_token_image").at("status"), "pass");
  EXPECT_NE(m.at("first_token_image").at("title").get<std::string>().find("under 40 s"), std::string::npos);
  EXPECT_NE(m.at("first_token_text").at("title").get<std::string>().find("under 20 s"), std::string::npos);
  EXPECT_NE(m.at("first_token_image").at("detail").get<std::string>().find("slowest 'look'"), std::string::npos);
  EXPECT_EQ(m.at("image_prompts").at("status"), "pass");
  EXPECT_NE(m.at("image_prompts").at("detail").get<std::string>().find("'look'"), std::string::npos);
}

TEST(Checklist, BadKeysAreRefused) {
  Ran r = run("bad-key", config(bed().llama, "checklist: {first_token_s: 3}\n"));
  EXPECT_EQ(r.o.exit_code, 2) << r.o.output;
  EXPECT_NE(r.o.output.find("checklist.first_token_s: unknown key"), std::string::npos) << r.o.output;
  r = run("bad-limit", config(bed().llama, "checklist: {first_token_text_s: 0}\n"));
  EXPECT_EQ(r.o.exit_code, 2) << r.o.output;
  EXPECT_NE(r.o.output.find("checklist.first_token_text_s: must be a number of seconds > 0"), std::string::npos)
      << r.o.output;
  r = run("bad-repetition", config(bed().llama, "debug: {perturb: {point: embed, scale: 2, repetition: 3}}\n"), "--repeat 2");
  EXPECT_EQ(r.o.exit_code, 2) << r.o.output;
  EXPECT_NE(r.o.output.find("debug.perturb.repetition: 3 is past the run's 2 repetition(s)"), std::string::npos)
      << r.o.output;
  EXPECT_EQ(run_dayzero("run x.yaml --repeat 0").exit_code, 2);
}

}  // namespace
}  // namespace dayzero::e2e
