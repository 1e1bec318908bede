// dayzero timeline RUN_DIR [--chrome-trace out.json] [--json]: merges the per-rank event logs
// and heartbeats of a run folder (no HDF5 needed, so it works on a job that hung or died)
// into per-phase and per-group spreads and a hang analysis with a verdict; optionally writes
// a Chrome trace / Perfetto JSON. Exit 0 once analysed (a hang found included), 2 when the
// folder is not a run folder or the trace cannot be written.
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "diag/timeline_analysis.h"
#include "diag/timeline_merge.h"

namespace dayzero::cli {
namespace {

struct TimelineArgs {
  std::string run_dir;
  std::string chrome_trace;
  bool json = false;
};

int run_timeline(const TimelineArgs& a) {
  // The slices themselves (O(events) memory) only for the Chrome trace.
  auto trails = diag::load_run_trails(a.run_dir, {.keep_slices = !a.chrome_trace.empty()});
  if (!trails.ok()) {
    std::cerr << "dayzero: error: " << trails.status().message() << std::endl;
    return 2;
  }
  if (!a.chrome_trace.empty()) {
    std::ofstream f(a.chrome_trace, std::ios::binary | std::ios::trunc);
    f << diag::chrome_trace(*trails).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    f.close();
    if (!f) {
      std::cerr << "dayzero: error: cannot write " << a.chrome_trace << std::endl;
      return 2;
    }
  }
  const diag::Analysis an = diag::analyse(*trails);
  if (a.json)
    std::cout << diag::to_json(an).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else
    std::cout << "run folder: " << a.run_dir << "\n" << diag::to_text(an);
  int skipped = 0;
  for (const auto& r : trails->ranks) skipped += r.skipped_lines;
  if (skipped > 0) std::cerr << "dayzero: warning: " << skipped << " malformed or unpaired event line(s) skipped\n";
  return 0;
}

}  // namespace

void add_timeline_command(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<TimelineArgs>();
  CLI::App* cmd = app.add_subcommand(
      "timeline", "Merge a run folder's event logs: phase and collective spreads, hang analysis, Chrome trace");
  cmd->add_option("run_dir", a->run_dir, "Run folder (with events/ and live/)")->required();
  cmd->add_option("--chrome-trace", a->chrome_trace, "Write a Chrome trace / Perfetto JSON (one track per rank)");
  cmd->add_flag("--json", a->json, "Print the analysis as JSON");
  cmd->callback([&commands, a] { commands.action = [a] { return run_timeline(*a); }; });
}

}  // namespace dayzero::cli
