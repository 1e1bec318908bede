// The subcommands: each add_* registers its options on the app and sets the action to run
// after parsing. Actions return the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <string>

#include "core/status.h"

namespace dayzero::cli {

struct Commands {
  std::function<int()> action;
  int run() const { return action ? action() : 2; }
};

// Prints "dayzero COMMAND: message" on stderr; returns the status's documented exit code.
inline int report_failure(const char* command, const Status& s) {
  std::cerr << "dayzero " << command << ": " << s.message() << std::endl;
  return s.exit_code();
}

void add_run_command(CLI::App& app, Commands& commands);
void add_serve_command(CLI::App& app, Commands& commands);
void add_make_model_command(CLI::App& app, Commands& commands);
void add_inspect_command(CLI::App& app, Commands& commands);
void add_plan_command(CLI::App& app, Commands& commands);
void add_compare_command(CLI::App& app, Commands& commands);
void add_timeline_command(CLI::App& app, Commands& commands);
void add_verify_command(CLI::App& app, Commands& commands);
void add_baseline_command(CLI::App& app, Commands& commands);
void add_kernels_command(CLI::App& app, Commands& commands);
void add_preflight_command(CLI::App& app, Commands& commands);

}  // namespace dayzero::cli
