// dayzero run CONFIG.yaml [--repeat N] [--replay-from RUN_DIR --replay-layers A:B]: alone or under
// mpirun/srun; ends with the Day-0 checklist (diag/checklist.h).
#include <memory>

#include "cli/commands.h"
#include "comm/mpi_env.h"
#include "core/log.h"
#include "runtime/runner.h"

namespace dayzero::cli {

void add_run_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<runtime::RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run the prompts of a run config and write the dump");
  cmd->add_option("config", args->config_path, "Run config (YAML)")->required();
  cmd->add_option("--dump-dir", args->dump_dir_override, "Run folder, replacing dump.dir of the config");
  cmd->add_option("--threads", args->threads, "CPU threads per rank (default: cores / ranks on the node)");
  cmd->add_option("--replay-from", args->replay_from,
                  "Run folder whose recorded input of layer A (prefill, full mode) is fed to layers A..B-1");
  cmd->add_option("--replay-layers", args->replay_layers,
                  "A:B, half-open: replay layers A..B-1 only (12:13 is layer 12); loads only their weights");
  cmd->add_option("--repeat", args->repeat,
                  "Run the prompts N times in this job and check the outputs are bitwise identical (checklist)")
      ->check(CLI::Range(1, 1000));
  cmd->callback([&commands, args] {
    commands.action = [args] {
      int argc = 0;
      char** argv = nullptr;
      comm::MpiEnv env(&argc, &argv);
      init_logging(env.rank(), env.world_size());
      return runtime::run(env, *args);
    };
  });
}

}  // namespace dayzero::cli
