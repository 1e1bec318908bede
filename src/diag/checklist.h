// The Day-0 checklist every `dayzero run` ends with: from the figures the ranks gathered
// (weights, peak memory, first-token latencies, repetitions, expects), one line per check with
// pass / fail / not run, printed and written to the run folder as checklist.json (schema in
// docs/dump-schema.md). Pure evaluation and formatting: the gathering is the run's
// (runtime/run/run.cpp), and nothing here touches MPI.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::diag {

inline constexpr const char* kChecklistFileName = "checklist.json";
inline constexpr int kChecklistSchemaVersion = 1;

// What one rank contributes.
struct ChecklistRank {
  int rank = 0;
  std::string host;
  int64_t peak_bytes = 0;    // peak memory of the process (CPU: peak RSS; CUDA: device peak)
  int64_t device_bytes = 0;  // the device's memory (CPU: the per-rank budget: node memory / ranks, or the configured cap)
  int64_t cap_bytes = 0;     // memory_fraction x device_bytes: what the plan may use
  int64_t slices = 0;        // tensor slices this rank loaded
  int64_t bytes_read = 0;
  int64_t nan = 0, inf = 0;  // non-finite values found in the loaded bytes
};

// One prompt, from the rank that owns its outputs.
struct ChecklistPrompt {
  std::string id;
  bool image = false;          // the prompt has images
  double first_token_s = 0;    // its prefill: from the start of its forward to the first token
  bool has_expect = false;
  std::string failed_expect;   // empty when its expect holds (or it has none)
  std::string repeat_diff;     // empty when every repetition gave identical outputs
};

// One stage's expert load, from the rank that writes its activations (a MoE model only).
struct ExpertLoad {
  int rank = 0;
  double expert_max_over_mean = 0, ep_rank_max_over_mean = 0;  // worst over the stage's MoE layers
  int hot_layer = -1, hot_expert = -1, hot_rank = -1;          // its hottest expert and the rank holding it
  int64_t hot_tokens = 0;
};

struct ChecklistInputs {
  int64_t tensors_total = 0;    // tensors of the checkpoint the run had to hold
  int64_t tensors_claimed = 0;  // of those, held by some rank (the coverage check)
  std::string weights_scope;    // "" or e.g. "layers 2..3 (a replay)"
  std::vector<ChecklistRank> ranks;
  std::vector<ChecklistPrompt> prompts;
  int repeat = 1;               // --repeat N; 1: the reproducibility check is not run
  double first_token_text_s = 30, first_token_image_s = 60;
  double memory_fraction = 0.9;
  std::vector<ExpertLoad> expert_load;  // empty for a dense model
};

// kInfo: a figure shown for its own sake, never a failure (the expert load).
enum class CheckStatus { kPass, kFail, kNotRun, kInfo };
const char* check_status_name(CheckStatus s);  // "pass", "fail", "not run", "info"

struct ChecklistLine {
  std::string key;     // weights, peak_memory, first_token_text, first_token_image, image_prompts, repeat, expect
  std::string title;   // "weights loaded completely"
  CheckStatus status = CheckStatus::kNotRun;
  std::string detail;  // the figures behind the verdict, one sentence
};

struct Checklist {
  // Always the seven above, in that order; an eighth, expert_load (kInfo), when the inputs carry
  // an expert load: "expert load max/mean <= 2.57 (ep ranks <= 2.00); hottest ..."
  std::vector<ChecklistLine> lines;
  bool pass() const;                 // no line failed
};

// One line per check; a failed line names what failed (the worst rank and its figure, the
// slowest prompt, the prompts whose repetitions differed).
Checklist evaluate_checklist(const ChecklistInputs& in);

// "Day-0 checklist:" then one "  PASS    title: detail" line per check.
std::string format_checklist(const Checklist& c);

// checklist.json of a run that reached its end: {schema_version, complete: true, exit_code,
// repeat, lines: [{key, title, status, detail}]}.
nlohmann::ordered_json checklist_to_json(const Checklist& c, int exit_code, int repeat);
// The record of a run that stopped at a phase: {schema_version, complete: false, exit_code,
// failed_phase, error, lines: []}.
nlohmann::ordered_json failed_run_json(int exit_code, const std::string& phase, const std::string& error);

// The first difference between two repetitions' outputs of one prompt, as a phrase naming the
// repetition ("repetition 2: generated token 3 is 17, not 42"); empty when all are bitwise equal.
// Shapes: ids [n_generated], logits [n_vocab], topk [n_steps * k].
struct RepeatOutputs {
  std::span<const int32_t> generated_ids;
  std::span<const float> logits_last;
  std::span<const int32_t> step_topk_ids;
  std::span<const float> step_topk_logits;
};
std::string repeat_difference(const RepeatOutputs& first, const RepeatOutputs& again, int repetition);

// Reads RUN_DIR/checklist.json (bounded JSON reader). NotFound when absent; InvalidArgument
// naming the file when it is not a checklist record.
Result<nlohmann::json> read_checklist(const std::string& run_dir);

}  // namespace dayzero::diag
