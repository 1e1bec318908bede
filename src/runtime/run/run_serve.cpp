// The serve phase of `dayzero serve` (runtime/serve_hooks.h): the loaded model, tokenizer and
// every rank's load time handed to the serve loop. SIGTERM stops being a fault from here on:
// the serve loop drains on it and the run ends with its dump closed as usual.
#include <string>
#include <vector>

#include "comm/mpi_env.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {

Status Run::serve_requests() {
  Watchdog::defer_sigterm();
  const std::vector<std::string> loads = comm::all_gather_strings(std::to_string(load_stats_.seconds));
  Forward fwd(*be_, *model_.adapter, model_.hp, weights_, part_);
  DZ_RETURN_IF_ERROR(apply_perturbation(fwd));  // debug.perturb holds for served requests too
  GenerateOptions go;
  go.max_new_tokens = cfg_.generate.max_new_tokens;
  go.stop_at_eos = cfg_.generate.stop_at_eos;
  go.eos_ids = tok_->eos_ids();
  go.top_k = 0;  // served requests record no top-k
  ServeContext ctx{cfg_, fwd, *tok_, model_.hp, go, watchdog_, heartbeat_.get(), cfg_.model.path, run_dir_,
                   env_.rank(), {}, phase_seconds_};
  for (const std::string& l : loads) ctx.load_seconds.push_back(std::stod(l));
  ctx.writer = writer_.get();
  ctx.be = be_.get();
  ctx.writes_outputs = writes_outputs_;
  ctx.writes_activations = writes_activations_;
  ctx.replica = plan_.coord(env_.rank()).dp_rank;
  ctx.replicas = plan_.dp;
  ctx.replica_size = plan_.pp * plan_.tp;
  return args_.serve->serve(ctx);
}

}  // namespace dayzero::runtime
