// The phase sequence of `dayzero run` (runner.h): each phase, then an agreement of its status
// over the world, both under the watchdog; the exit path of a failed phase; the summaries
// printed by rank 0 and the agreement on the prompts' expects. The phases themselves are in
// the other files of this folder.
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "comm/groups.h"
#include "comm/op_watch.h"
#include "core/log.h"
#include "diag/hang_report.h"
#include "dump/run_folder.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {
// How long MPI_Abort may take before the watchdog's second timer _exit(3)s the process.
constexpr double kAbortGraceS = 5;
}  // namespace

int Run::fail(const Status& s, const std::string& phase) {
  if (env_.rank() == 0) std::cerr << "dayzero: error: " << s.message() << std::endl;
  if (env_.rank() == 0 && !run_dir_.empty() && !phase.empty()) record_failed_run(s, phase);
  if (args_.serve) args_.serve->on_abort();
  if (heartbeat_) heartbeat_->stop();
  return s.exit_code();
}

void Run::on_abort(const std::string& why) {
  if (args_.serve) args_.serve->on_abort();
  if (events_) (void)events_->append(realtime_ns(), "begin", "abort", why, "", -1, 0);
  // run_dir_ is written once by the main thread, before the heartbeat (and so any report) exists.
  if (run_dir_.empty() || !heartbeat_) return;
  diag::HangSelf self = hang_watch_.view();
  self.host = env_.hostname();
  self.reason = why;
  const dump::Timeline::Recent recent = timeline_.recent();
  for (const dump::TimelineEvent& e : recent.events)
    self.last_events.push_back({{"t_begin_ns", e.t_begin_ns}, {"t_end_ns", e.t_end_ns}, {"kind", e.kind},
                                {"name", e.name}, {"group", e.group}, {"seq", e.seq}, {"bytes", e.bytes}});
  self.events_total = recent.total;
  const nlohmann::ordered_json report = diag::make_hang_report(run_dir_, env_.world_size(), self, realtime_ns());
  const Status s = diag::write_hang_report(run_dir_, report, env_.rank());
  if (!s.ok()) std::fprintf(stderr, "dayzero: error: %s\n", s.message().c_str());
  std::string suspects;
  for (const auto& r : report["suspects"]) suspects += (suspects.empty() ? "" : ", ") + r.dump();
  if (!suspects.empty())
    std::fprintf(stderr, "dayzero: error: rank %d: not inside it, per their heartbeats: rank(s) %s; hang report %s\n",
                 env_.rank(), suspects.c_str(), dump::hang_report_path(run_dir_, env_.rank()).c_str());
  std::fflush(stderr);
}

int Run::execute() {
  Watchdog::install_sigterm_handler();
  // Only at MPI_THREAD_MULTIPLE may the watchdog thread call MPI_Abort; otherwise it exits and
  // the launcher ends the job (see docs/usage.md "Watchdog").
  watchdog_.set_abort_mode(env_.thread_level() == MPI_THREAD_MULTIPLE, kAbortGraceS);
  comm::set_op_observer(&hang_watch_);
  struct Uninstall {
    ~Uninstall() { comm::set_op_observer(nullptr); }
  } uninstall;
  using Phase = Status (Run::*)();
  std::vector<std::pair<const char*, Phase>> phases = {
      {"config", &Run::read_config},          {"model check", &Run::open_model_and_prompts},
      {"replay source", &Run::open_replay_source},
      {"plan", &Run::plan_and_partition},     {"run folder", &Run::make_run_folder},
      {"backend", &Run::create_backend},      {"dump file", &Run::open_dump_file},
      {"load", &Run::load_checkpoint},        {"tune", &Run::tune_kernels},
      {"coverage", &Run::check_coverage},
      {"prompts", &Run::run_prompts},         {"dump", &Run::finish},
  };
  if (args_.serve) phases.insert(phases.end() - 1, {"serve", &Run::serve_requests});
  for (const auto& [name, phase] : phases) {
    hang_watch_.set_phase(name);
    if (args_.serve) args_.serve->on_phase(name);
    const int64_t phase_start = monotonic_ns();
    Status local;
    {
      WatchdogScope w(watchdog_, std::string("phase '") + name + "'", phase_timeout());
      // The dump phase writes /timeline itself, which cannot hold its own end: no event for it.
      std::optional<dump::ScopedEvent> ev;
      if (std::string_view(name) != "dump") ev.emplace(timeline_, "phase", name);
      local = (this->*phase)();
      if (args_.serve && local.ok() && std::string_view(name) == "config")
        local = args_.serve->listen(cfg_, env_.rank(), env_.world_size());
    }
    Status agreed;
    {
      WatchdogScope w(watchdog_, std::string("the agreement after phase '") + name + "'", collective_timeout());
      agreed = comm::agree(local);
    }
    if (!agreed.ok()) return fail(agreed, name);
    phase_seconds_.emplace_back(name, static_cast<double>(monotonic_ns() - phase_start) * 1e-9);
    if (heartbeat_) hang_watch_.set_heartbeat(heartbeat_.get());
  }
  hang_watch_.set_heartbeat(nullptr);
  heartbeat_->set_phase("done");
  heartbeat_->set_current("");
  heartbeat_->stop();
  // Every rank's summary and checklist figures go to rank 0, which prints the summaries in
  // rank order (output forwarded by the launcher from several ranks would interleave), then
  // the checklist; its verdict (expects included) is agreed so every rank exits alike.
  const nlohmann::json mine = {{"summary", summary_text()}, {"checklist", checklist_figures()}};
  const std::vector<std::string> gathered = comm::all_gather_strings(mine.dump());
  Status verdict;
  if (env_.rank() == 0) {
    std::vector<std::string> figures;
    for (const auto& text : gathered) {
      const nlohmann::json j = nlohmann::json::parse(text);
      std::cout << j["summary"].get<std::string>();
      figures.push_back(j["checklist"].get<std::string>());
    }
    std::cout << "dump: " << run_dir_ << "\n" << std::flush;
    verdict = report_checklist(figures);
  }
  const Status s = comm::agree(verdict);
  if (!s.ok()) return fail(s, "");
  return 0;
}

Result<JobPlan> Run::plan_only() {
  using Phase = Status (Run::*)();
  const std::pair<const char*, Phase> phases[] = {
      {"config", &Run::read_config}, {"model check", &Run::open_model_and_prompts}, {"plan", &Run::plan_and_partition}};
  for (const auto& [name, phase] : phases) {
    const Status agreed = comm::agree((this->*phase)());
    if (!agreed.ok()) return agreed;
  }
  return JobPlan{cfg_, plan_};
}

int run(const comm::MpiEnv& env, const RunArgs& args) { return Run(env, args).execute(); }

Result<JobPlan> plan_job(const comm::MpiEnv& env, const RunArgs& args) { return Run(env, args).plan_only(); }

}  // namespace dayzero::runtime
