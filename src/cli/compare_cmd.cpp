// dayzero compare RUN_A RUN_B | RUN --baseline NAME: compares two run folders (or a baseline of
// the library, diag/baseline.h, and a run) key by key (any plans, any world sizes), reports
// per-tensor errors, output agreement and the layer to blame, and exits 0 when they agree
// within the tolerance, 1 when they do not, 2 for bad input, mismatched keys or a run that is
// not of the baseline's model, prompts, dtype or dump settings. The work is in diag/; this file
// only parses options and prints.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "diag/baseline.h"
#include "diag/compare_report.h"
#include "diag/compare_run.h"
#include "diag/compare_tolerance.h"

namespace dayzero::cli {
namespace {

struct CompareArgs {
  std::string run_a, run_b, tolerance, report;
  std::string baseline, library;  // --baseline NAME: A is LIBRARY/NAME, B is run_a
  bool json = false, allow_incomplete = false;
};

int run_compare(const CompareArgs& given) {
  CompareArgs a = given;
  std::optional<nlohmann::ordered_json> baseline;
  if (!a.baseline.empty()) {
    if (!a.run_b.empty()) return report_failure("compare", Status::InvalidArgument("give RUN_A RUN_B, or one RUN with --baseline NAME"));
    const std::string library = diag::baseline_library(a.library);
    auto b = diag::read_baseline(library, a.baseline);
    if (!b.ok()) return report_failure("compare", b.status());
    baseline = std::move(*b);
    a.run_b = a.run_a;
    a.run_a = *diag::baseline_dir(library, a.baseline);
  } else if (a.run_b.empty()) {
    return report_failure("compare", Status::InvalidArgument("RUN_B is required (or --baseline NAME)"));
  } else if (!a.library.empty()) {
    return report_failure("compare", Status::InvalidArgument("--library goes with --baseline"));
  }
  auto ra = diag::open_run(a.run_a, a.allow_incomplete);
  if (!ra.ok()) return report_failure("compare", ra.status());
  auto rb = diag::open_run(a.run_b, a.allow_incomplete);
  if (!rb.ok()) return report_failure("compare", rb.status());
  if (baseline) {
    const Status s = diag::check_against_baseline(*baseline, *rb);
    if (!s.ok()) return report_failure("compare", s);
  }
  for (const auto* run : {&*ra, &*rb})
    for (const std::string& f : run->incomplete) std::cerr << "dayzero compare: warning: " << f << " is incomplete\n";
  const std::string preset =
      diag::looser_preset(diag::preset_for_dtype(ra->compute_dtype), diag::preset_for_dtype(rb->compute_dtype));
  const bool named = a.tolerance == "f32" || a.tolerance == "bf16" || a.tolerance == "fp8";
  auto tol = a.tolerance.empty() ? diag::tolerance_preset(preset)
             : named             ? diag::tolerance_preset(a.tolerance)
                                 : diag::load_tolerance_file(a.tolerance, preset);
  if (!tol.ok()) return report_failure("compare", tol.status());
  auto result = diag::compare_runs(*ra, *rb, *tol, a.allow_incomplete);
  if (!result.ok()) return report_failure("compare", result.status());
  if (a.json) std::cout << diag::compare_to_json(*result).dump(1) << std::endl;
  else std::cout << diag::format_compare_table(*result);
  if (!a.report.empty()) {
    const Status s = diag::write_compare_report(*result, a.report);
    if (!s.ok()) return report_failure("compare", s);
    std::cerr << "dayzero compare: report written to " << (std::filesystem::path(a.report) / "compare.html").string()
              << std::endl;
  }
  return result->pass ? 0 : 1;
}

}  // namespace

void add_compare_command(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Compare two run folders: per-tensor errors, outputs, first divergence and blame");
  cmd->add_option("run_a", a->run_a, "Reference run folder (rank-*.h5); with --baseline, the run to check")->required();
  cmd->add_option("run_b", a->run_b, "Run folder to compare with it (not with --baseline)");
  cmd->add_option("--baseline", a->baseline,
                  "Compare RUN against this baseline of the library (the reference); exit 2 when RUN's model, prompts, "
                  "dtype or dump settings are not the baseline's, one line per item");
  cmd->add_option("--library", a->library,
                  std::string("Baseline library (default: $") + diag::kBaselineLibraryEnv + ", else ./" +
                      diag::kDefaultBaselineLibrary + ")");
  cmd->add_option("--tolerance", a->tolerance,
                  "Preset f32, bf16 or fp8, or a YAML file overriding points (default: from the runs' compute dtype)");
  cmd->add_option("--report", a->report, "Write compare.html (with per-layer error curves) and compare.json here");
  cmd->add_flag("--json", a->json, "Print the full comparison as JSON instead of the table");
  cmd->add_flag("--allow-incomplete", a->allow_incomplete,
                "Compare files of unfinished runs and the keys both sides hold");
  cmd->callback([&commands, a] { commands.action = [a] { return run_compare(*a); }; });
}

}  // namespace dayzero::cli
