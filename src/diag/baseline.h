// The baseline library: a folder of named baselines, each the outputs and selected activations
// of a run that passed, merged into one rank file (so `dayzero compare` reads it as a run of one
// rank), with the run's capture settings and an identity record. Identity that must match a
// run compared against it: the model (config.json hash, shard file sizes and safetensors
// header hashes), the prompts (ids, token ids, images), the compute dtype, the dump and generate
// settings; recorded but expected to differ: plan, world size, version, hosts. Not the
// comparison (compare_run.h) and not the CLI (cli/baseline_cmd.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/status.h"
#include "diag/compare_run.h"

namespace dayzero::diag {

inline constexpr const char* kBaselineFileName = "baseline.json";
inline constexpr const char* kBaselineLibraryEnv = "DAYZERO_BASELINE_LIBRARY";
inline constexpr const char* kDefaultBaselineLibrary = "baselines";  // relative to the working directory

// --library when given, else $DAYZERO_BASELINE_LIBRARY when set and non-empty, else "baselines".
std::string baseline_library(const std::string& given);

// LIBRARY/NAME. InvalidArgument unless name is [A-Za-z0-9][A-Za-z0-9._-]* (at most 100).
Result<std::string> baseline_dir(const std::string& library, const std::string& name);

// What a run folder is, for a baseline: {"match": {model, dtype, dump, generate, prompts},
// "recorded": {plan, world_size, dayzero_version, hosts, backend, started_at, dump_mode}}, from
// its identity.json, its rank files' root attributes and each prompt's /outputs prompt_ids.
// InvalidArgument naming the file when identity.json is absent or malformed.
Result<nlohmann::ordered_json> run_identity(const RunIndex& run);

// One line per item of the "match" parts that differs ("model: shard model.safetensors is 1234
// bytes in the baseline, 1240 in the run"); empty when they agree. `a` and `b` name the two
// sides in the lines ("the baseline", "the run").
std::vector<std::string> identity_mismatches(const nlohmann::ordered_json& match_a, const nlohmann::ordered_json& match_b,
                                             const std::string& a, const std::string& b);

struct SaveOptions {
  std::string run_dir, name, library;
  std::string activations;  // "stats", "full" or "" (as the run dumped them)
};

struct SaveResult {
  std::string dir;                   // LIBRARY/NAME
  bool replaced = false;             // an earlier baseline of that name was replaced
  std::vector<std::string> changes;  // what changed from it, one line per item
  nlohmann::ordered_json record;     // the baseline.json written
};

// Saves a run that passed: its checklist.json records exit code 0 for a complete run, every
// rank file is complete, it is not a replay. Otherwise InvalidArgument with one sentence that
// says why. "full" of a run that dumped statistics only is InvalidArgument too. The folder is
// built beside LIBRARY/NAME and renamed into place, so a failure leaves the old one intact.
Result<SaveResult> save_baseline(const SaveOptions& o);

// LIBRARY/NAME/baseline.json. NotFound when there is no such baseline.
Result<nlohmann::ordered_json> read_baseline(const std::string& library, const std::string& name);

// Every baseline.json of the library, by name; an unreadable one is an entry {name, error}.
// NotFound when the library folder does not exist.
Result<std::vector<nlohmann::ordered_json>> list_baselines(const std::string& library);

// InvalidArgument listing one line per identity item in which the run differs from the
// baseline (identity_mismatches); Ok when they match.
Status check_against_baseline(const nlohmann::ordered_json& baseline, const RunIndex& run);

}  // namespace dayzero::diag
