// dayzero: one executable, one subcommand per file in this folder. This is the only
// catch-all: an exception that escapes a subcommand ends the job with exit 3.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dayzero: bring up a new open model on a cluster, prove it runs, and leave evidence behind"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dayzero ") + DAYZERO_VERSION);
  dayzero::cli::Commands commands;
  dayzero::cli::add_run_command(app, commands);
  dayzero::cli::add_serve_command(app, commands);
  dayzero::cli::add_make_model_command(app, commands);
  dayzero::cli::add_inspect_command(app, commands);
  dayzero::cli::add_plan_command(app, commands);
  dayzero::cli::add_compare_command(app, commands);
  dayzero::cli::add_timeline_command(app, commands);
  dayzero::cli::add_verify_command(app, commands);
  dayzero::cli::add_baseline_command(app, commands);
  dayzero::cli::add_kernels_command(app, commands);
  dayzero::cli::add_preflight_command(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return commands.run();
  } catch (const std::exception& e) {
    std::cerr << "dayzero: internal error: " << e.what() << std::endl;
    return 3;
  }
}
