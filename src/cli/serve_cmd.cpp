// dayzero serve CONFIG.yaml [--port N]: the run of `dayzero run` up to its prompts (the warm-up),
// then an OpenAI-style HTTP service on the first rank of each data-parallel replica (serve.port +
// replica) until SIGTERM (src/serve/, docs/serve.md).
#include <memory>

#include "cli/commands.h"
#include "cli/job_command.h"
#include "serve/service.h"

namespace dayzero::cli {

void add_serve_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<serve::ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Load the model of a run config and answer OpenAI-style HTTP requests");
  add_run_config_options(cmd, args->run, "Run config (YAML); its prompts are the warm-up");
  cmd->add_option("--port", args->port, "Port replica 0 listens on (replica r: port + r), replacing serve.port")->check(CLI::Range(1, 65535));
  cmd->callback([&commands, args] {
    commands.action = mpi_action([args](comm::MpiEnv& env) { return serve::serve(env, *args); });
  });
}

}  // namespace dayzero::cli
