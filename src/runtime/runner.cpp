// The run phases and the summary printed at the end.
#include "runtime/runner.h"

#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
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
#include "runtime/watchdog.h"
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

// The plan of this build: data parallel over the world, one stage, no tensor split.
nlohmann::json make_plan(const model::HParams& hp, const comm::MpiEnv& env, int64_t weight_bytes) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < env.world_size(); ++r)
    ranks.push_back({{"rank", r}, {"dp", r}, {"pp", 0}, {"tp", 0}, {"ep", 0}, {"etp", 0}});
  return {{"world_size", env.world_size()},
          {"dp", env.world_size()}, {"pp", 1}, {"tp", 1}, {"ep", 1}, {"etp", 1},
          {"stages", {{{"pp", 0}, {"layers", {0, hp.n_layer}}, {"embedding", true}, {"lm_head", true}}}},
          {"ranks", ranks},
          {"per_rank_weight_bytes", weight_bytes}};
}

Status check_parallel(const config::ParallelConfig& p, int world) {
  const auto fixed_one = [](const std::optional<int>& v) { return !v || *v == 1; };
  if (!fixed_one(p.pp) || !fixed_one(p.tp) || !fixed_one(p.ep) || !fixed_one(p.etp))
    return Status::Unsupported("parallel: pipeline, tensor and expert partitions are not supported by this "
                               "build; use pp=tp=ep=1 (ranks run prompts data-parallel)");
  if (p.dp && *p.dp != world)
    return Status::InvalidArgument("parallel.dp=" + std::to_string(*p.dp) + " does not match the " +
                                   std::to_string(world) + " ranks of this job");
  return Status::Ok();
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
  Status make_folder();
  Status load();
  Status run_prompts();
  Status finish();
  void print_summary() const;
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
  std::unique_ptr<Backend> be_;
  model::Weights weights_;
  std::vector<checkpoint::WeightRecord> records_;
  LoadStats load_stats_;
  std::vector<PromptRun> prompts_;  // this rank's share, tokenized
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
  DZ_RETURN_IF_ERROR(check_parallel(cfg_.parallel, env_.world_size()));
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
    if (static_cast<int>(i) % env_.world_size() == env_.rank()) prompts_.push_back(std::move(run));
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
      s = write_file(fs::path(dir) / dump::kPlanFileName,
                     make_plan(model_.hp, env_, static_cast<int64_t>(model_.catalog.total_bytes())).dump(2));
  }
  DZ_RETURN_IF_ERROR(comm::agree(s));
  run_dir_ = comm::broadcast_string(dir);
  DZ_ASSIGN_OR_RETURN(events_, dump::EventLog::open(dump::event_log_path(run_dir_, env_.rank())));
  timeline_.attach(events_.get());
  DZ_ASSIGN_OR_RETURN(heartbeat_, dump::Heartbeat::start(dump::heartbeat_path(run_dir_, env_.rank()), env_.rank()));

  const int64_t offset = comm::measure_clock_offset_ns();
  BackendOptions bo;
  bo.kind = "cpu";
  bo.threads = args_.threads > 0 ? args_.threads : cfg_.runtime.threads.value_or(default_threads(env_));
  if (cfg_.topology.device_memory_gib)
    bo.memory_budget_bytes = static_cast<int64_t>(*cfg_.topology.device_memory_gib * (1LL << 30));
  DZ_ASSIGN_OR_RETURN(be_, make_backend(bo));

  if (!cfg_.dump.enabled) return Status::Ok();
  dump::RootAttributes a;
  a.dayzero_version = DAYZERO_VERSION;
  a.rank = env_.rank();
  a.world_size = env_.world_size();
  a.dp = env_.world_size();
  a.hostname = env_.hostname();
  a.device = be_->device().to_string();
  a.backend = be_->name();
  a.model_config = model_.config.dump();
  a.plan = make_plan(model_.hp, env_, static_cast<int64_t>(model_.catalog.total_bytes())).dump();
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
  DZ_ASSIGN_OR_RETURN(load_stats_, load_weights(model_, *be_, weights_, records_,
                                                [&](const checkpoint::WeightRecord& r) {
                                                  heartbeat_->set_current("load " + r.name);
                                                }));
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

Status Run::run_prompts() {
  Forward fwd(*be_, *model_.adapter, model_.hp, weights_);
  for (PromptRun& pr : prompts_) {
    const config::Prompt& p = *pr.prompt;
    heartbeat_->set_phase("prompt " + p.id);
    dump::ScopedEvent ev(timeline_, "prompt", p.id);
    GenerateOptions go;
    go.max_new_tokens = cfg_.generate.max_new_tokens;
    go.stop_at_eos = cfg_.generate.stop_at_eos;
    go.eos_ids = tok_->eos_ids();
    go.top_k = cfg_.generate.top_k_record;
    const auto& sel = cfg_.dump.activations;
    std::unique_ptr<DumpSink> prefill_sink, decode_sink;
    if (writer_ && sel.wants_prefill())
      prefill_sink = std::make_unique<DumpSink>(*writer_, *be_, sel, p.id, dump::kPhasePrefill);
    if (writer_ && sel.wants_decode())
      decode_sink = std::make_unique<DumpSink>(*writer_, *be_, sel, p.id, dump::kPhaseDecode);
    pr.gen = generate(fwd, *be_, model_.hp, pr.ids, go, {prefill_sink.get(), decode_sink.get()});
    if (prefill_sink) DZ_RETURN_IF_ERROR(prefill_sink->status());
    if (decode_sink) DZ_RETURN_IF_ERROR(decode_sink->status());
    pr.text = tok_->decode(pr.gen.generated_ids, true);
    if (!pr.reference_ids.empty()) pr.nll = reference_nll(fwd, *be_, model_.hp, pr.ids, pr.reference_ids);
    pr.failed_expect = check_expect(p.expect, pr.text, pr.gen.generated_ids);
    if (!writer_) continue;
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
    DZ_RETURN_IF_ERROR(writer_->write_output(out));
    DZ_RETURN_IF_ERROR(writer_->flush());
  }
  return Status::Ok();
}

Status Run::finish() {
  if (!writer_) return Status::Ok();
  const auto mem = be_->memory_info();
  nlohmann::json summary = {{"load_seconds", load_stats_.seconds},
                            {"load_bytes", load_stats_.bytes_read},
                            {"peak_memory_bytes", mem.peak_bytes},
                            {"gemm", be_->describe()}};
  DZ_RETURN_IF_ERROR(writer_->set_attribute("summary", summary.dump()));
  DZ_RETURN_IF_ERROR(writer_->write_timeline(timeline_.snapshot()));
  DZ_RETURN_IF_ERROR(writer_->mark_complete());
  return writer_->close();
}

void Run::print_summary() const {
  // Each rank prints its own prompts; rank 0 adds the job-wide lines.
  std::ostringstream os;
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tok = 0, decode_tok = 0;
  for (const PromptRun& pr : prompts_) {
    const std::string shown = pr.prompt->text ? *pr.prompt->text : "[" + join_ids(pr.ids) + "]";
    os << "\n[" << pr.prompt->id << "] " << shown << "\n  -> " << pr.text << "\n  ids: " << join_ids(pr.gen.generated_ids)
       << (pr.gen.stopped_at_eos ? " (eos)" : "") << "\n";
    if (pr.nll) os << "  reference NLL " << *pr.nll << " nats/token, perplexity " << std::exp(*pr.nll) << "\n";
    if (!pr.failed_expect.empty()) os << "  EXPECT FAILED: " << pr.failed_expect << "\n";
    prefill_s += pr.gen.prefill_seconds;
    decode_s += pr.gen.decode_seconds;
    prefill_tok += static_cast<int64_t>(pr.ids.size());
    decode_tok += pr.gen.decode_tokens;
  }
  const auto mem = be_->memory_info();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\nrank %d timings: load %.3f s (%.2f GB/s, %llu tensors) | prefill %lld tok in %.3f s (%.1f tok/s) | "
                "decode %lld tok in %.3f s (%.1f tok/s) | peak memory %.1f MiB\n",
                env_.rank(), load_stats_.seconds,
                load_stats_.seconds > 0 ? static_cast<double>(load_stats_.bytes_read) / load_stats_.seconds * 1e-9 : 0.0,
                static_cast<unsigned long long>(load_stats_.tensors), static_cast<long long>(prefill_tok), prefill_s,
                prefill_s > 0 ? static_cast<double>(prefill_tok) / prefill_s : 0.0, static_cast<long long>(decode_tok),
                decode_s, decode_s > 0 ? static_cast<double>(decode_tok) / decode_s : 0.0,
                static_cast<double>(mem.peak_bytes) / (1 << 20));
  os << buf;
  if (env_.rank() == 0) os << "dump: " << run_dir_ << "\n";
  std::cout << os.str() << std::flush;
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
      {"run folder", &Run::make_folder}, {"load", &Run::load},
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
  // Prompt outputs in rank order so a multi-rank job prints deterministically.
  for (int r = 0; r < env_.world_size(); ++r) {
    if (r == env_.rank()) print_summary();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::string failed;
  for (const PromptRun& pr : prompts_)
    if (!pr.failed_expect.empty()) failed += (failed.empty() ? "" : "; ") + ("prompt '" + pr.prompt->id + "': " + pr.failed_expect);
  const Status s = comm::agree(failed.empty() ? Status::Ok() : Status::CheckFailed(failed));
  if (!s.ok()) return fail(s);
  return 0;
}

}  // namespace

int run(const comm::MpiEnv& env, const RunArgs& args) { return Run(env, args).execute(); }

}  // namespace dayzero::runtime
