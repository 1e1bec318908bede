// dayzero run CONFIG.yaml [--repeat N] [--replay-from RUN_DIR --replay-layers A:B]: alone or under
// mpirun/srun; ends with the Day-0 checklist (diag/checklist.h).
#include <memory>

#include "cli/commands.h"
#include "cli/job_command.h"
#include "runtime/runner.h"

namespace dayzero::cli {

void add_run_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<runtime::RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run the prompts of a run config and write the dump");
  add_run_config_options(cmd, *args, "Run config (YAML)");
  cmd->add_option("--replay-from", args->replay_from,
                  "Run folder whose recorded input of layer A (prefill, full mode) is fed to layers A..B-1");
  cmd->add_option("--replay-layers", args->replay_layers,
                  "A:B, half-open: replay layers A..B-1 only (12:13 is layer 12); loads only their weights");
  cmd->add_option("--repeat", args->repeat,
                  "Run the prompts N times in this job and check the outputs are bitwise identical (checklist)")
      ->check(CLI::Range(1, 1000));
  cmd->callback([&commands, args] {
    commands.action = mpi_action([args](comm::MpiEnv& env) { return runtime::run(env, *args); });
  });
}

}  // namespace dayzero::cli
