// The Run of `dayzero run` (runner.h), shared by the files of this folder, one per phase:
// run_config_phase.cpp, run_images.cpp, run_plan.cpp, run_folder.cpp, run_backend.cpp, run_load.cpp,
// run_prompts.cpp, run_replay.cpp, run_summary.cpp; run.cpp holds the phase sequence and the exit path.
// Internal to the runtime: nothing outside src/runtime/run/ includes it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "comm/groups.h"
#include "comm/mpi_env.h"
#include "config/run_config.h"
#include "core/clock.h"
#include "diag/compare_run.h"
#include "dump/dump_writer.h"
#include "dump/event_log.h"
#include "dump/heartbeat.h"
#include "dump/timeline.h"
#include "image/processed_image.h"
#include "image/processor.h"
#include "model/weights.h"
#include "plan/plan.h"
#include "runtime/forward.h"
#include "runtime/generate.h"
#include "runtime/hang_watch.h"
#include "runtime/model_loader.h"
#include "runtime/runner.h"
#include "runtime/serve_hooks.h"
#include "runtime/watchdog.h"
#include "tokenizer/tokenizer.h"

namespace dayzero::runtime {

struct PromptRun {
  const config::Prompt* prompt = nullptr;
  std::vector<int32_t> ids;  // image placeholders already expanded to the images' feature rows
  // The prompt's images as its processor leaves them, in prompt order: filled where the prompt
  // is read (with ids expanded by model::blocks::expand_image_placeholders), handed to prefill.
  std::vector<image::ProcessedImage> images;
  std::vector<int32_t> reference_ids;
  Generation gen;
  std::string text;
  std::optional<double> nll;
  std::string failed_expect;  // empty when every expect holds
  std::string repeat_diff;    // --repeat: the first difference of a later repetition; empty when identical
};

// THE hand-over of a prompt's images to the forward pass (run_images.cpp): what the vision
// tower of the prompt's sequence consumes, one entry per `images:` path, in order.
const std::vector<image::ProcessedImage>& prompt_images(const PromptRun& p);

// "3 17 42": token ids for messages and the summary.
std::string join_ids(const std::vector<int32_t>& ids);

class Run {
 public:
  Run(const comm::MpiEnv& env, const RunArgs& args)
      : env_(env), args_(args), watchdog_(env.rank(), [this](const std::string& why) { on_abort(why); }),
        hang_watch_(watchdog_, env.rank()) {}
  int execute();
  // plan_job (runner.h): the phases up to the plan, each agreed; the config and the plan.
  Result<JobPlan> plan_only();

 private:
  // The phases, in order (run.cpp); each is followed by an agreement over the world.
  Status read_config();             // run_config_phase.cpp: the run config YAML
  Status check_prompt_images() const;  // run_images.cpp: every prompt image's file and header
  Status open_model_and_prompts();  // run_config_phase.cpp: model folder, tensor check, tokenized prompts
  Status open_replay_source();      // run_replay.cpp: with --replay-from, the source run's inputs checked
  Status plan_and_partition();      // run_plan.cpp: topology, plan, groups, this rank's partition and prompts
  Status make_run_folder();         // run_folder.cpp: folder, config.yaml, plan.json, event log, heartbeat
  Status create_backend();          // run_backend.cpp: the compute backend of this rank
  Status open_dump_file();          // run_folder.cpp: this rank's HDF5 file and its root attributes
  Status load_checkpoint();         // run_load.cpp: this rank's slices, checked against the plan
  Status tune_kernels();            // run_load.cpp: the GEMM settings timed on the weights (prefill path: rank 0's)
  Status check_coverage();          // run_load.cpp: every tensor held by some rank; job-wide load figures
  // run_load.cpp: what a device keeps each weight as (absent on the CPU, which keeps f32).
  std::optional<plan::WeightsOnDevice> weights_on_device() const;
  Result<bool> uses_cuda() const;  // run_backend.cpp: backend auto/cuda against the visible GPUs
  // run_load.cpp, device backends: the weight bytes allocated against the plan's (equal, else
  // Internal), then the caches and workspaces pre-sized from the plan (Backend::reserve).
  Status check_device_weights_and_reserve();
  // run_images.cpp: prompt i's images (its `images:` files through the model's processor, made
  // into `processor` at first use, and debug.image_patterns) into run.images, its placeholders
  // expanded in run.ids; before any weight is read. A text-only model is refused.
  Status add_prompt_images(size_t i, PromptRun& run, std::unique_ptr<image::ImageProcessor>& processor) const;
  Status run_prompts();             // run_prompts.cpp: prefill, decode, reference NLL, outputs
  // run_prompts.cpp: one pass over this replica's prompts: the first is the run (dumped,
  // scored, written); a repetition (--repeat) dumps nothing and records in each PromptRun how
  // its outputs differ from the first's. Collective over the replica, as run_prompts.
  void run_prompt_pass(Forward& fwd, const GenerateOptions& go, Status& dump_status);
  void repeat_prompt_pass(Forward& fwd, const GenerateOptions& go, int repetition);
  Status serve_requests();          // run_serve.cpp: `dayzero serve`'s phase (args_.serve)
  Status run_replay_prompts();      // run_replay.cpp: run_prompts of a replay (recorded inputs, its layers only)
  Status apply_perturbation(Forward& fwd) const;  // run_prompts.cpp: debug.perturb, checked against the model
  std::string replay_input_name() const;          // run_replay.cpp: "embed" or "layers.{A-1}.layer_out"
  Status finish();                  // run_summary.cpp: summary attributes, timeline, complete flag
  std::string summary_text() const;            // run_summary.cpp
  // run_checklist.cpp: this rank's figures for the checklist, as JSON text to gather.
  std::string checklist_figures() const;
  // run_checklist.cpp, rank 0: the checklist from every rank's figures; prints it, writes
  // checklist.json with the exit code, and returns the verdict (CheckFailed naming the failed
  // expects and lines).
  Status report_checklist(const std::vector<std::string>& figures) const;
  // run_checklist.cpp, rank 0: checklist.json of a run that stopped in `phase`.
  void record_failed_run(const Status& s, const std::string& phase) const;
  // run_folder.cpp, rank 0: identity.json, what a baseline must match (model files, dtype,
  // dump and generate settings, prompt ids) and what it records (plan, version).
  Status write_identity() const;
  nlohmann::json expert_load_report() const;   // run_summary.cpp
  int fail(const Status& s, const std::string& phase);
  // Called by the watchdog thread just before the job ends: leaves the reason in the event log
  // and this rank's hang report (hang/rank-N.json) in the run folder.
  void on_abort(const std::string& why);
  double phase_timeout() const { return config_loaded_ ? cfg_.watchdog.phase_timeout_s : 3600; }
  double collective_timeout() const { return config_loaded_ ? cfg_.watchdog.collective_timeout_s : 300; }

  const comm::MpiEnv& env_;
  RunArgs args_;
  config::RunConfig cfg_;
  std::string run_dir_;
  ModelInfo model_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<backend::Backend> be_;
  std::string comm_choice_;  // run_backend.cpp: "mpi", "nccl (...)", "mpi (device buffers staged ...)"
  model::Weights weights_;
  std::vector<checkpoint::WeightRecord> records_;
  LoadStats load_stats_;
  std::vector<PromptRun> prompts_;  // this rank's share, tokenized
  std::optional<std::pair<int, int>> replay_layers_;  // --replay-layers A:B as [A, B); absent: a full run
  std::optional<diag::RunIndex> replay_source_;       // --replay-from: the source run's rank files
  plan::Plan plan_;
  std::optional<comm::ProcessGroups> groups_;
  Partition part_;
  bool writes_outputs_ = true;  // last stage, tp rank 0: owns logits and outputs
  bool writes_activations_ = true;  // tp rank 0 of its stage
  std::vector<std::vector<int64_t>> expert_tokens_;  // [layer][expert] routed tokens, this stage
  int64_t peak_kv_cache_bytes_ = 0;  // most KV cache bytes resident at once on this rank
  int64_t device_weight_bytes_ = 0;  // device backends: weight bytes allocated (= the plan's)
  int64_t plan_tokens_ = 0;          // rows of the largest forward the plan sized: context x batch
  int64_t tensors_needed_ = 0, tensors_claimed_ = 0;  // the coverage check's counts (job-wide)
  int64_t device_memory_bytes_ = 0;  // the topology's per-rank device memory (CPU: the per-rank budget)
  double memory_fraction_ = 0.9;     // of it, what the plan may use (plan_.memory_cap_bytes)
  std::unique_ptr<dump::EventLog> events_;
  dump::Timeline timeline_;
  std::unique_ptr<dump::Heartbeat> heartbeat_;
  std::unique_ptr<dump::DumpWriter> writer_;
  int64_t started_ns_ = realtime_ns();
  std::vector<std::pair<std::string, double>> phase_seconds_;  // the phases done, with their wall time
  bool config_loaded_ = false;
  Watchdog watchdog_;
  HangWatch hang_watch_;  // the op observer while execute() runs
};

}  // namespace dayzero::runtime
