// `dayzero run`: one Day-0 run of a run config on this MPI job, from config to dump.
// Phases (src/runtime/run/, one file each): config -> model check -> replay source -> plan ->
// run folder -> backend -> dump file -> load -> tune -> coverage -> prompts -> dump; each ends with an agreement
// over all ranks, so every rank goes on or every rank stops with the same exit code. A replay
// (RunArgs::replay_*) runs only the given layers on another run's recorded inputs.
// Replica d of the plan's dp runs prompts d, d + dp, ...; inside a replica the model is split
// over pp stages and tp ranks as planned.
#pragma once

#include <string>

#include "comm/mpi_env.h"
#include "config/run_config.h"
#include "core/status.h"
#include "plan/plan.h"

namespace dayzero::runtime {

class ServeHooks;  // runtime/serve_hooks.h

struct RunArgs {
  std::string config_path;
  std::string dump_dir_override;  // --dump-dir: replaces dump.dir
  int threads = 0;                // --threads: overrides runtime.threads
  std::string replay_from;        // --replay-from: a run folder whose recorded layer inputs are replayed
  std::string replay_layers;      // --replay-layers A:B: the layers A..B-1 to replay (with replay_from)
  int repeat = 1;                 // --repeat N: the prompts run N times, outputs checked identical
  // `dayzero serve`: not owned; when set the run has dp = 1 unless parallel.dp is given (each
  // replica then serves on its own), its prompts are the warm-up, and a "serve" phase runs between
  // "prompts" and "dump" (runtime/serve_hooks.h).
  ServeHooks* serve = nullptr;
};

// Collective over MPI_COMM_WORLD. Returns the process exit code (docs/design.md "Errors").
int run(const comm::MpiEnv& env, const RunArgs& args);

// What `run` of args.config_path would use on this job: its run config as read and its plan,
// from the run's own first phases (config, model check, plan), each agreed over the world as in
// `run`; nothing is written and no weight is read. Errors: the phases' (every rank the same).
// Collective over MPI_COMM_WORLD.
struct JobPlan {
  config::RunConfig cfg;
  plan::Plan plan;
};
Result<JobPlan> plan_job(const comm::MpiEnv& env, const RunArgs& args);

}  // namespace dayzero::runtime
