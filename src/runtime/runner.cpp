// The run phases and the summary printed at the end.
#include "runtime/runner.h"

#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <thread>

#include "config/run_config.h"
#include "core/clock.h"
#include "core/log.h"
#include "dump/dump_writer.h"
#include "dump/event_log.h"
#include "dump/heartbeat.h"
#include "dump/run_folder.h"
#include "dump/schema.h"
#include "dump/timeline.h"
#include "runtime/dump_sink.h"
#include "runtime/generate.h"
#include "runtime/model_loader.h"
#include "runtime/progress.h"
#include "runtime/watchdog.h"
#include "comm/groups.h"
#include "plan/planner.h"
#include "plan/slicing.h"
#include "tokenizer/tokenizer.h"

#ifndef DAYZERO_VERSION
#define DAYZERO_VERSION "0.1.0"
#endif

namespace dayzero::runtime {
namespace fs = std::filesystem;
namespace {

struct PromptRun {
  const config::Prompt* prompt = nullptr;
  std::vector<int32_t> ids;
  std::vector<int32_t> reference_ids;
  Generation gen;
  std::string text;
  std::optional<double> nll;
  std::string failed_expect;  // empty when every expect holds
};

Status write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  return f ? Status::Ok() : Status::IoError("cannot write " + p.string());
}

// The topology of this job: nodes from the ranks' host names, ranks per node as GPUs per node,
// and the per-rank memory budget (run config, else this node's memory shared by its ranks).
// Collective over MPI_COMM_WORLD; every rank gets the same value (or the same error).
Result<plan::Topology> discover_topology(const comm::MpiEnv& env, const config::TopologyConfig& tc) {
  std::vector<std::string> hosts = comm::all_gather_strings(env.hostname());
  plan::Topology t;
  std::vector<std::string> names;
  for (const auto& h : hosts)
    if (std::find(names.begin(), names.end(), h) == names.end()) names.push_back(h);
  t.nodes = static_cast<int>(names.size());
  t.node_names = names;
  t.gpus_per_node = (env.world_size() + t.nodes - 1) / t.nodes;
  int64_t budget = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / std::max(1, env.local_size());
  budget = comm::all_reduce_min(budget);
  t.device_memory_bytes = budget;
  // A topology file replaces what was discovered; the run config's keys override both.
  if (tc.file) {
    DZ_ASSIGN_OR_RETURN(t, plan::load_topology(*tc.file, t));
  }
  if (tc.device_memory_gib) t.device_memory_bytes = static_cast<int64_t>(*tc.device_memory_gib * (1LL << 30));
  if (tc.memory_fraction) t.memory_fraction = *tc.memory_fraction;
  if (tc.nodes) t.nodes = *tc.nodes;
  if (tc.gpus_per_node) t.gpus_per_node = *tc.gpus_per_node;
  return t;
}

int default_threads(const comm::MpiEnv& env) {
  if (const char* e = std::getenv("DAYZERO_THREADS")) return std::max(1, std::atoi(e));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_size()));
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i];
  return os.str();
}

std::string check_expect(const config::Expect& e, const std::string& text, const std::vector<int32_t>& ids) {
  for (const auto& s : e.contains)
    if (text.find(s) == std::string::npos) return "expected the output to contain \"" + s + "\"";
  for (const auto& s : e.not_contains)
    if (text.find(s) != std::string::npos) return "expected the output not to contain \"" + s + "\"";
  for (size_t i = 0; i < e.first_tokens.size(); ++i)
    if (i >= ids.size() || ids[i] != e.first_tokens[i])
      return "expected first tokens [" + join_ids(e.first_tokens) + "], got [" + join_ids(ids) + "]";
  return "";
}

class Run {
 public:
  Run(const comm::MpiEnv& env, const RunArgs& args)
      : env_(env), args_(args), watchdog_(env.rank(), [this](const std::string& why) { on_abort(why); }) {}
  int execute();

 private:
  Status setup_config();
  Status open_model_and_tokenizer();
  Status make_plan();
  Status make_folder();
  Status load();
  Status check_coverage();
  Status run_prompts();
  Status finish();
  std::string summary_text() const;
  nlohmann::json expert_load_report() const;
  int fail(const Status& s);
  // Called by the watchdog thread just before the job ends: leaves the reason in the event log.
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
  model::Weights weights_;
  std::vector<checkpoint::WeightRecord> records_;
  LoadStats load_stats_;
  std::vector<PromptRun> prompts_;  // this rank's share, tokenized
  plan::Plan plan_;
  std::optional<comm::ProcessGroups> groups_;
  Partition part_;
  bool writes_outputs_ = true;  // last stage, tp rank 0: owns logits and outputs
  bool writes_activations_ = true;  // tp rank 0 of its stage
  std::vector<std::vector<int64_t>> expert_tokens_;  // [layer][expert] routed tokens, this stage
  int64_t peak_kv_cache_bytes_ = 0;  // most KV cache bytes resident at once on this rank
  std::unique_ptr<dump::EventLog> events_;
  dump::Timeline timeline_;
  std::unique_ptr<dump::Heartbeat> heartbeat_;
  std::unique_ptr<dump::DumpWriter> writer_;
  int64_t started_ns_ = realtime_ns();
  bool config_loaded_ = false;
  Watchdog watchdog_;
};

Status Run::setup_config() {
  DZ_ASSIGN_OR_RETURN(cfg_, config::load_run_config(args_.config_path));
  config_loaded_ = true;
  if (cfg_.backend == config::Backend::kCuda)
    return Status::Unsupported(cfg_.source_name + ": backend: cuda is not available in this build; use cpu or auto");
  return Status::Ok();
}

Status Run::open_model_and_tokenizer() {
  DZ_ASSIGN_OR_RETURN(model_, open_model(cfg_.model.path));
  DZ_RETURN_IF_ERROR(check_tensors(model_));
  DZ_ASSIGN_OR_RETURN(tok_, tokenizer::Tokenizer::load(cfg_.model.path));
  // Every prompt is tokenized and bounded before any weight is read.
  for (size_t i = 0; i < cfg_.prompts.size(); ++i) {
    const config::Prompt& p = cfg_.prompts[i];
    PromptRun run;
    run.prompt = &p;
    run.ids = p.tokens ? *p.tokens : tok_->encode(*p.text, true);
    if (!p.images.empty())
      return Status::Unsupported(cfg_.source_name + ": prompts[" + std::to_string(i) + "] ('" + p.id +
                                 "'): images need a vision adapter; " + model_.adapter->family() + " has none");
    if (run.ids.empty())
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' has no tokens");
    if (static_cast<int64_t>(run.ids.size()) > cfg_.limits.max_prompt_tokens)
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' has " +
                                     std::to_string(run.ids.size()) + " tokens, more than limits.max_prompt_tokens (" +
                                     std::to_string(cfg_.limits.max_prompt_tokens) + ")");
    for (int32_t id : run.ids)
      if (id < 0 || id >= model_.hp.n_vocab)
        return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': token id " + std::to_string(id) +
                                       " is outside the vocabulary (" + std::to_string(model_.hp.n_vocab) + ")");
    if (p.reference) run.reference_ids = tok_->encode(*p.reference, false);
    const int64_t total = static_cast<int64_t>(run.ids.size() + run.reference_ids.size()) + cfg_.generate.max_new_tokens;
    if (total > model_.hp.max_position)
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' needs " + std::to_string(total) +
                                     " positions, more than max_position_embeddings (" +
                                     std::to_string(model_.hp.max_position) + ")");
    prompts_.push_back(std::move(run));
  }
  return Status::Ok();
}

Status Run::make_plan() {
  plan::PlanRequest req;
  req.hp = model_.hp;
  req.specs = model_.specs;
  req.names = plan::edge_names(*model_.adapter, model_.hp);
  DZ_ASSIGN_OR_RETURN(req.topo, discover_topology(env_, cfg_.topology));
  req.world_size = env_.world_size();
  req.dp = cfg_.parallel.dp;
  req.pp = cfg_.parallel.pp;
  req.tp = cfg_.parallel.tp;
  req.ep = cfg_.parallel.ep;
  req.etp = cfg_.parallel.etp;
  switch (cfg_.model.weights_on_device) {
    case config::WeightsOnDevice::kAsStored:
      // Each tensor at its own stored size (FP8 1 byte plus its f32 scales, BF16 2); a tensor
      // the checkpoint lacks (only skip_load ones may) counts as the embedding's dtype.
      req.bytes_per_weight = static_cast<int64_t>(dtype_size(model_.catalog.find(model_.specs[0].name)->dtype));
      req.stored_bytes.reserve(model_.specs.size());
      for (const auto& spec : model_.specs) {
        const auto* t = model_.catalog.find(spec.name);
        req.stored_bytes.push_back(t ? static_cast<int64_t>(dtype_size(t->dtype)) : req.bytes_per_weight);
      }
      break;
    case config::WeightsOnDevice::kBF16: req.bytes_per_weight = 2; break;
    case config::WeightsOnDevice::kF32: req.bytes_per_weight = 4; break;
  }
  req.bytes_per_activation = 4;  // the CPU computes in f32
  int64_t longest = 1;
  for (const auto& pr : prompts_)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(pr.ids.size() + pr.reference_ids.size()) +
                                             cfg_.generate.max_new_tokens);
  req.max_context_tokens = longest;
  auto chosen = plan::choose_plan(req);
  if (!chosen.ok()) return chosen.status().with_context(cfg_.source_name);
  plan_ = std::move(chosen).value();
  DZ_ASSIGN_OR_RETURN(auto groups, comm::ProcessGroups::create(plan_, env_.rank(), &timeline_));
  groups_.emplace(std::move(groups));

  const plan::RankCoord& me = plan_.coord(env_.rank());
  const plan::Stage& stage = plan_.stage_of(env_.rank());
  part_.layer_begin = stage.layer_begin;
  part_.layer_end = stage.layer_end;
  part_.first_stage = stage.has_embedding;
  part_.last_stage = stage.has_lm_head;
  part_.tp = plan_.tp > 1 ? &groups_->tp() : nullptr;
  part_.pp = plan_.pp > 1 ? &groups_->pp() : nullptr;
  const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
  for (const auto& spec : model_.specs)
    if (spec.name == names.embed) {
      const plan::Slice s = plan::tp_slice(spec, plan_.tp, me.tp_rank);
      if (s.dim == 0) {
        part_.vocab_begin = s.begin;
        part_.vocab_end = s.end;
      }
    }
  writes_activations_ = me.tp_rank == 0;
  writes_outputs_ = me.tp_rank == 0 && stage.has_lm_head;
  // Data parallel: replica d runs prompts d, d + dp, ...
  std::vector<PromptRun> mine;
  for (size_t i = 0; i < prompts_.size(); ++i)
    if (static_cast<int>(i) % plan_.dp == me.dp_rank) mine.push_back(std::move(prompts_[i]));
  prompts_ = std::move(mine);
  if (env_.rank() == 0) {
    std::string stages;
    for (const auto& st : plan_.stages)
      stages += " | stage " + std::to_string(st.pp) + ": layers " + std::to_string(st.layer_begin) + "-" +
                std::to_string(st.layer_end - 1) + (st.has_embedding ? " +embedding" : "") +
                (st.has_lm_head ? " +lm_head" : "");
    DZ_LOG_INFO("plan: dp={} pp={} tp={} (ep={} etp={}) over {} rank(s){}", plan_.dp, plan_.pp, plan_.tp, plan_.ep,
                plan_.etp, plan_.world_size, stages);
  }
  return Status::Ok();
}

Status Run::make_folder() {
  std::string dir;
  Status s;
  if (env_.rank() == 0) {
    auto expanded = args_.dump_dir_override.empty()
                        ? config::expand_dump_dir(cfg_.dump.dir, cfg_.config_stem, started_ns_)
                        : Result<std::string>(args_.dump_dir_override);
    if (!expanded.ok()) s = expanded.status();
    else dir = *expanded;
    if (s.ok()) s = dump::make_run_folder(dir);
    if (s.ok()) s = write_file(fs::path(dir) / dump::kConfigFileName, cfg_.source_text);
    if (s.ok())
      s = write_file(fs::path(dir) / dump::kPlanFileName, plan::to_json(plan_).dump(2));
  }
  DZ_RETURN_IF_ERROR(comm::agree(s));
  run_dir_ = comm::broadcast_string(dir);
  DZ_ASSIGN_OR_RETURN(events_, dump::EventLog::open(dump::event_log_path(run_dir_, env_.rank())));
  timeline_.attach(events_.get());
  DZ_ASSIGN_OR_RETURN(heartbeat_, dump::Heartbeat::start(dump::heartbeat_path(run_dir_, env_.rank()), env_.rank()));

  const int64_t offset = comm::measure_clock_offset_ns();
  backend::BackendOptions bo;
  bo.kind = "cpu";
  bo.threads = args_.threads > 0 ? args_.threads : cfg_.runtime.threads.value_or(default_threads(env_));
  if (cfg_.topology.device_memory_gib)
    bo.memory_budget_bytes = static_cast<int64_t>(*cfg_.topology.device_memory_gib * (1LL << 30));
  DZ_ASSIGN_OR_RETURN(be_, backend::make_backend(bo));

  if (!cfg_.dump.enabled) return Status::Ok();
  dump::RootAttributes a;
  a.dayzero_version = DAYZERO_VERSION;
  a.rank = env_.rank();
  a.world_size = env_.world_size();
  a.dp = plan_.dp;
  a.pp = plan_.pp;
  a.tp = plan_.tp;
  a.ep = plan_.ep;
  a.etp = plan_.etp;
  a.hostname = env_.hostname();
  a.device = be_->device().to_string();
  a.backend = be_->name();
  a.model_config = model_.config.dump();
  a.plan = plan::to_json(plan_).dump();
  a.run_config = cfg_.source_text;
  a.started_at = utc_iso8601(started_ns_);
  a.clock_offset_ns = offset;
  DZ_ASSIGN_OR_RETURN(writer_, dump::DumpWriter::create(dump::dump_path(run_dir_, env_.rank()), a));
  return Status::Ok();
}

Status Run::load() {
  heartbeat_->set_phase("load");
  dump::ScopedEvent ev(timeline_, "phase", "load");
  if (env_.rank() == 0) DZ_LOG_INFO("backend {}", be_->describe());
  const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
  // The bytes this rank will read, from the plan's slices: the progress total and the check below.
  uint64_t expected = 0;
  for (const auto& spec : model_.specs) {
    if (spec.skip_load) continue;
    const plan::Slice s = plan::slice_for(spec, model_.hp, plan_, env_.rank(), names);
    if (s.held)
      expected += static_cast<uint64_t>(
          plan::slice_bytes(spec, s, static_cast<int64_t>(dtype_size(model_.catalog.find(spec.name)->dtype))));
  }
  uint64_t loaded = 0;
  heartbeat_->set_progress(0, static_cast<int64_t>(expected));
  std::optional<ProgressReporter> progress;
  if (env_.rank() == 0) progress.emplace(run_dir_, env_.world_size(), "load");
  const SliceFn slice_of = [&](const model::TensorSpec& spec) {
    const plan::Slice s = plan::slice_for(spec, model_.hp, plan_, env_.rank(), names);
    return TensorSlice{s.held, s.dim, s.begin, s.end};
  };
  DZ_ASSIGN_OR_RETURN(load_stats_, load_weights(
                                       model_, *be_, weights_, records_,
                                       [&](const checkpoint::WeightRecord& r) {
                                         loaded += r.bytes_read;
                                         heartbeat_->set_current("load " + r.name);
                                         heartbeat_->set_progress(static_cast<int64_t>(loaded),
                                                                  static_cast<int64_t>(expected));
                                       },
                                       slice_of, static_cast<size_t>(cfg_.runtime.staging_mib.value_or(256)) << 20));
  // The loader's own counters against the plan: exactly the bytes of this rank's slices.
  if (expected != load_stats_.bytes_read)
    return Status::Internal("loaded " + std::to_string(load_stats_.bytes_read) + " bytes, the plan's slices hold " +
                            std::to_string(expected));
  if (!writer_) return Status::Ok();
  std::vector<dump::WeightRow> rows;
  for (const auto& r : records_) {
    dump::WeightRow w;
    w.name = r.name;
    w.file = fs::path(r.file).filename().string();
    w.dtype = dtype_name(r.dtype);
    w.shape = r.shape;
    w.offset = r.ranges.empty() ? 0 : r.ranges.front().first;
    w.bytes_read = r.bytes_read;
    w.ranges = r.ranges.size();
    w.checksum = r.checksum;
    w.nan_count = r.nan_count;
    w.inf_count = r.inf_count;
    rows.push_back(std::move(w));
  }
  return writer_->write_weights(rows);
}

Status Run::check_coverage() {
  // Collective over the world: every checkpoint tensor (every spec; check_tensors matched
  // them one to one) must be held by at least one rank.
  std::vector<int64_t> held(model_.specs.size(), 0);
  for (size_t i = 0; i < model_.specs.size(); ++i)  // skip_load specs are claimed, never held
    held[i] = model_.specs[i].skip_load || weights_.has(model_.specs[i].name) ? 1 : 0;
  DZ_RETURN_IF_ERROR(groups_->world().all_reduce_max_int(held.data(), static_cast<int>(held.size())));
  for (size_t i = 0; i < held.size(); ++i)
    if (!held[i])
      return Status::Internal("coverage: tensor " + model_.specs[i].name + " is held by no rank under the plan");
  // The job-wide load figures: bytes over all ranks, time of the slowest rank.
  int64_t totals[2] = {static_cast<int64_t>(load_stats_.bytes_read), static_cast<int64_t>(load_stats_.seconds * 1e9)};
  int64_t bytes_all = totals[0];
  DZ_RETURN_IF_ERROR(groups_->world().all_reduce_max_int(&totals[1], 1));
  MPI_Allreduce(&totals[0], &bytes_all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const double secs = static_cast<double>(totals[1]) * 1e-9;
  if (env_.rank() == 0)
    DZ_LOG_INFO("[load] 100% {:.3f} GB of checkpoint {:.3f} GB read by {} rank(s) in {:.3f} s ({:.2f} GB/s)",
                static_cast<double>(bytes_all) * 1e-9, static_cast<double>(model_.catalog.total_bytes()) * 1e-9,
                env_.world_size(), secs, secs > 0 ? static_cast<double>(bytes_all) * 1e-9 / secs : 0.0);
  return Status::Ok();
}

Status Run::run_prompts() {
  Forward fwd(*be_, *model_.adapter, model_.hp, weights_, part_);
  if (model_.hp.n_expert > 0) fwd.count_expert_tokens(&expert_tokens_);
  GenerateOptions go;
  go.max_new_tokens = cfg_.generate.max_new_tokens;
  go.stop_at_eos = cfg_.generate.stop_at_eos;
  go.eos_ids = tok_->eos_ids();
  go.top_k = cfg_.generate.top_k_record;
  const auto& sel = cfg_.dump.activations;
  const auto make_sink = [&](const std::string& id, const char* phase, bool wanted) -> std::unique_ptr<DumpSink> {
    if (!writer_ || !writes_activations_ || !wanted) return nullptr;
    return std::make_unique<DumpSink>(*writer_, *be_, sel, id, phase);
  };
  // A failed dump write is kept and reported after the loops: returning early would leave
  // the other ranks of the replica waiting in a collective.
  Status dump_status;
  const auto keep = [&](const Status& s) {
    if (dump_status.ok() && !s.ok()) dump_status = s;
  };

  // Waves of at most generate.max_batch prompts: a wave is prefilled back to back (pipeline
  // stages overlap across its prompts), then decoded as one batch; its caches are gone before
  // the next wave, so at most max_batch sequences are resident at once.
  const size_t wave = static_cast<size_t>(std::max(1, cfg_.generate.max_batch));
  for (size_t begin = 0; begin < prompts_.size(); begin += wave) {
    const size_t end = std::min(prompts_.size(), begin + wave);
    std::vector<Sequence> seqs;
    for (size_t i = begin; i < end; ++i) {
      PromptRun& pr = prompts_[i];
      heartbeat_->set_phase("prefill " + pr.prompt->id);
      dump::ScopedEvent ev(timeline_, "prefill", pr.prompt->id);
      auto sink = make_sink(pr.prompt->id, dump::kPhasePrefill, sel.wants_prefill());
      seqs.push_back(prefill(fwd, model_.hp, pr.ids, go, sink.get()));
      if (sink) keep(sink->status());
    }
    std::vector<std::unique_ptr<DumpSink>> decode_sinks;
    std::vector<model::ActivationSink*> sink_ptrs;
    std::string names;
    for (size_t i = begin; i < end; ++i) {
      decode_sinks.push_back(make_sink(prompts_[i].prompt->id, dump::kPhaseDecode, sel.wants_decode()));
      sink_ptrs.push_back(decode_sinks.back().get());
      names += (names.empty() ? "" : ",") + prompts_[i].prompt->id;
    }
    // One decode event per prompt, from the wave's first step until the prompt leaves the batch.
    heartbeat_->set_phase("decode " + names);
    std::vector<dump::Timeline::Handle> decoding;
    for (size_t i = begin; i < end; ++i) decoding.push_back(timeline_.begin("decode", prompts_[i].prompt->id));
    std::vector<Generation> gens =
        decode_batch(fwd, model_.hp, std::move(seqs), go, sink_ptrs, [&](size_t i) { timeline_.end(decoding[i]); });
    for (const auto& sink : decode_sinks)
      if (sink) keep(sink->status());
    for (size_t i = begin; i < end; ++i) {
      PromptRun& pr = prompts_[i];
      const config::Prompt& p = *pr.prompt;
      pr.gen = std::move(gens[i - begin]);
      pr.text = tok_->decode(pr.gen.generated_ids, true);
      if (!pr.reference_ids.empty()) {
        fwd.count_expert_tokens(nullptr);  // the expert load covers prompts and generated tokens only
        pr.nll = reference_nll(fwd, model_.hp, pr.ids, pr.reference_ids);
        if (model_.hp.n_expert > 0) fwd.count_expert_tokens(&expert_tokens_);
      }
      pr.failed_expect = check_expect(p.expect, pr.text, pr.gen.generated_ids);
      if (!writer_ || !writes_outputs_) continue;
      dump::OutputRecord out;
      out.prompt_id = p.id;
      out.prompt_ids = pr.ids;
      out.generated_ids = pr.gen.generated_ids;
      out.text = pr.text;
      out.logits_last = pr.gen.logits_last;
      out.topk = std::min<int64_t>(go.top_k, model_.hp.n_vocab);
      out.step_topk_ids = pr.gen.step_topk_ids;
      out.step_topk_logits = pr.gen.step_topk_logits;
      if (pr.nll) {
        out.reference_nll = *pr.nll;
        out.reference_tokens = static_cast<int64_t>(pr.reference_ids.size());
      }
      keep(writer_->write_output(out));
      keep(writer_->flush());
    }
  }
  peak_kv_cache_bytes_ = fwd.kv_cache_peak_bytes();
  return dump_status;
}

Status Run::finish() {
  if (!writer_) return Status::Ok();
  const auto mem = be_->memory_info();
  nlohmann::json summary = {{"load_seconds", load_stats_.seconds},
                            {"load_bytes", load_stats_.bytes_read},
                            {"peak_memory_bytes", mem.peak_bytes},
                            {"peak_kv_cache_bytes", peak_kv_cache_bytes_},
                            {"max_batch", cfg_.generate.max_batch},
                            {"gemm", be_->describe()}};
  DZ_RETURN_IF_ERROR(writer_->set_attribute("summary", summary.dump()));
  if (writes_activations_ && model_.hp.n_expert > 0)
    DZ_RETURN_IF_ERROR(writer_->set_attribute("expert_load", expert_load_report().dump()));
  DZ_RETURN_IF_ERROR(writer_->write_timeline(timeline_.snapshot()));
  DZ_RETURN_IF_ERROR(writer_->mark_complete());
  return writer_->close();
}

nlohmann::json Run::expert_load_report() const {
  // Per MoE layer of this stage: tokens per expert and per ep rank, and max/mean of each.
  nlohmann::json layers = nlohmann::json::array();
  const auto imbalance = [](const std::vector<int64_t>& v) {
    int64_t sum = 0, mx = 0;
    for (int64_t x : v) {
      sum += x;
      mx = std::max(mx, x);
    }
    return sum > 0 ? static_cast<double>(mx) * static_cast<double>(v.size()) / static_cast<double>(sum) : 0.0;
  };
  for (size_t l = 0; l < expert_tokens_.size(); ++l) {
    const auto& per_expert = expert_tokens_[l];
    if (per_expert.empty()) continue;
    std::vector<int64_t> per_rank(static_cast<size_t>(plan_.ep), 0);
    const size_t block = per_expert.size() / static_cast<size_t>(plan_.ep);
    for (size_t e = 0; e < per_expert.size(); ++e) per_rank[e / block] += per_expert[e];
    layers.push_back({{"layer", l}, {"tokens_per_expert", per_expert}, {"tokens_per_ep_rank", per_rank},
                      {"expert_max_over_mean", imbalance(per_expert)}, {"ep_rank_max_over_mean", imbalance(per_rank)}});
  }
  return {{"ep", plan_.ep}, {"layers", layers}};
}

std::string Run::summary_text() const {
  // Each rank prints its own prompts; rank 0 adds the job-wide lines.
  std::ostringstream os;
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tok = 0, decode_tok = 0;
  for (const PromptRun& pr : prompts_) {
    prefill_s += pr.gen.prefill_seconds;
    decode_s += pr.gen.decode_seconds;
    prefill_tok += static_cast<int64_t>(pr.ids.size());
    decode_tok += pr.gen.decode_tokens;
    if (!writes_outputs_) continue;  // the same prompt is printed once, by its output owner
    const std::string shown = pr.prompt->text ? *pr.prompt->text : "[" + join_ids(pr.ids) + "]";
    os << "\n[" << pr.prompt->id << "] " << shown << "\n  -> " << pr.text << "\n  ids: " << join_ids(pr.gen.generated_ids)
       << (pr.gen.stopped_at_eos ? " (eos)" : "") << "\n";
    if (pr.nll) os << "  reference NLL " << *pr.nll << " nats/token, perplexity " << std::exp(*pr.nll) << "\n";
    if (!pr.failed_expect.empty()) os << "  EXPECT FAILED: " << pr.failed_expect << "\n";
  }
  if (writes_activations_ && model_.hp.n_expert > 0) {
    const nlohmann::json load = expert_load_report();
    double worst_expert = 0, worst_rank = 0;
    int worst_layer = -1;
    for (const auto& l : load["layers"]) {
      if (l["expert_max_over_mean"].get<double>() > worst_expert) {
        worst_expert = l["expert_max_over_mean"].get<double>();
        worst_layer = l["layer"].get<int>();
      }
      worst_rank = std::max(worst_rank, l["ep_rank_max_over_mean"].get<double>());
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "\nrank %d expert load: %zu MoE layer(s); worst expert max/mean %.2f (layer %d), worst ep-rank "
                  "max/mean %.2f over ep=%d (per layer in the dump's expert_load attribute)\n",
                  env_.rank(), load["layers"].size(), worst_expert, worst_layer, worst_rank, plan_.ep);
    os << line;
  }
  const auto mem = be_->memory_info();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\nrank %d timings: load %.3f s (%.2f GB/s, %llu tensors) | prefill %lld tok in %.3f s (%.1f tok/s) | "
                "decode %lld tok in %.3f s (%.1f tok/s, batches of <= %d) | peak memory %.1f MiB\n",
                env_.rank(), load_stats_.seconds,
                load_stats_.seconds > 0 ? static_cast<double>(load_stats_.bytes_read) / load_stats_.seconds * 1e-9 : 0.0,
                static_cast<unsigned long long>(load_stats_.tensors), static_cast<long long>(prefill_tok), prefill_s,
                prefill_s > 0 ? static_cast<double>(prefill_tok) / prefill_s : 0.0, static_cast<long long>(decode_tok),
                decode_s, decode_s > 0 ? static_cast<double>(decode_tok) / decode_s : 0.0, cfg_.generate.max_batch,
                static_cast<double>(mem.peak_bytes) / (1 << 20));
  os << buf;
  return os.str();
}

int Run::fail(const Status& s) {
  if (env_.rank() == 0) std::cerr << "dayzero: error: " << s.message() << std::endl;
  if (heartbeat_) heartbeat_->stop();
  return s.exit_code();
}

void Run::on_abort(const std::string& why) {
  if (events_) (void)events_->append(realtime_ns(), "begin", "abort", why, "", -1, 0);
}

int Run::execute() {
  Watchdog::install_sigterm_handler();
  using Phase = Status (Run::*)();
  const std::pair<const char*, Phase> phases[] = {
      {"config", &Run::setup_config},    {"model check", &Run::open_model_and_tokenizer},
      {"plan", &Run::make_plan},         {"run folder", &Run::make_folder},
      {"load", &Run::load},              {"coverage", &Run::check_coverage},
      {"prompts", &Run::run_prompts},    {"dump", &Run::finish},
  };
  for (const auto& [name, phase] : phases) {
    Status local;
    {
      WatchdogScope w(watchdog_, std::string("phase '") + name + "'", phase_timeout());
      local = (this->*phase)();
    }
    Status agreed;
    {
      WatchdogScope w(watchdog_, std::string("the agreement after phase '") + name + "'", collective_timeout());
      agreed = comm::agree(local);
    }
    if (!agreed.ok()) return fail(agreed);
  }
  heartbeat_->set_phase("done");
  heartbeat_->set_current("");
  heartbeat_->stop();
  // Every rank's summary goes to rank 0, which prints them in rank order: output forwarded
  // by the launcher from several ranks would interleave.
  const std::vector<std::string> summaries = comm::all_gather_strings(summary_text());
  if (env_.rank() == 0) {
    for (const auto& text : summaries) std::cout << text;
    std::cout << "dump: " << run_dir_ << "\n" << std::flush;
  }
  std::string failed;
  for (const PromptRun& pr : prompts_)
    if (writes_outputs_ && !pr.failed_expect.empty()) failed += (failed.empty() ? "" : "; ") + ("prompt '" + pr.prompt->id + "': " + pr.failed_expect);
  const Status s = comm::agree(failed.empty() ? Status::Ok() : Status::CheckFailed(failed));
  if (!s.ok()) return fail(s);
  return 0;
}

}  // namespace

int run(const comm::MpiEnv& env, const RunArgs& args) { return Run(env, args).execute(); }

}  // namespace dayzero::runtime
