// dayzero serve CONFIG.yaml [--port N]: the run of `dayzero run` up to its prompts (the warm-up),
// then an OpenAI-style HTTP service on the first rank of each data-parallel replica (serve.port +
// replica) until SIGTERM (src/serve/, docs/serve.md).
#include <memory>

#include "cli/commands.h"
#include "comm/mpi_env.h"
#include "core/log.h"
#include "serve/service.h"

namespace dayzero::cli {

void add_serve_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<serve::ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Load the model of a run config and answer OpenAI-style HTTP requests");
  cmd->add_option("config", args->run.config_path, "Run config (YAML); its prompts are the warm-up")->required();
  cmd->add_option("--dump-dir", args->run.dump_dir_override, "Run folder, replacing dump.dir of the config");
  cmd->add_option("--threads", args->run.threads, "CPU threads per rank (default: cores / ranks on the node)");
  cmd->add_option("--port", args->port, "Port replica 0 listens on (replica r: port + r), replacing serve.port")->check(CLI::Range(1, 65535));
  cmd->callback([&commands, args] {
    commands.action = [args] {
      int argc = 0;
      char** argv = nullptr;
      comm::MpiEnv env(&argc, &argv);
      init_logging(env.rank(), env.world_size());
      return serve::serve(env, *args);
    };
  });
}

}  // namespace dayzero::cli
