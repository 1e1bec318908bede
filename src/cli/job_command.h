// What the commands that run a job under MPI share: the options of a job over a run config
// (`run`, `serve`), and an action that brings up MPI and per-rank logging before the job
// (`run`, `serve`, `verify`).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <utility>

#include "comm/mpi_env.h"
#include "core/log.h"
#include "runtime/runner.h"

namespace dayzero::cli {

// The run config, --dump-dir and --threads, into args.
inline void add_run_config_options(CLI::App* cmd, runtime::RunArgs& args, const std::string& config_help) {
  cmd->add_option("config", args.config_path, config_help)->required();
  cmd->add_option("--dump-dir", args.dump_dir_override, "Run folder, replacing dump.dir of the config");
  cmd->add_option("--threads", args.threads, "CPU threads per rank (default: cores / ranks on the node)");
}

// A Commands::action that runs job over MPI_COMM_WORLD (alone or under mpirun/srun), logging per rank.
inline std::function<int()> mpi_action(std::function<int(comm::MpiEnv&)> job) {
  return [job = std::move(job)] {
    int argc = 0;
    char** argv = nullptr;
    comm::MpiEnv env(&argc, &argv);
    init_logging(env.rank(), env.world_size());
    return job(env);
  };
}

}  // namespace dayzero::cli
