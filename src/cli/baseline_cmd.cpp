// dayzero baseline save|list|show: the baseline library (diag/baseline.h). `save` stores a run
// that passed under LIBRARY/NAME; `list` and `show` read the library. Comparing a run against
// a baseline is `dayzero compare RUN --baseline NAME` (compare_cmd.cpp).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "diag/baseline.h"

namespace dayzero::cli {
namespace {

struct BaselineArgs {
  std::string run_dir, name, library, activations;
  bool json = false;
};

std::string text_of(const nlohmann::ordered_json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "?";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

int run_save(const BaselineArgs& a) {
  const std::string library = diag::baseline_library(a.library);
  auto r = diag::save_baseline({a.run_dir, a.name, library, a.activations});
  if (!r.ok()) return report_failure("baseline", r.status());
  std::cout << (r->replaced ? "replaced" : "saved") << " baseline '" << a.name << "' in " << r->dir << " from "
            << a.run_dir << " (activations: " << text_of(r->record, "activations") << ")\n";
  if (r->replaced) {
    if (r->changes.empty()) std::cout << "  unchanged: identity, plan, versions, hosts and outputs are the old baseline's\n";
    for (const std::string& c : r->changes) std::cout << "  changed: " << c << "\n";
  }
  return 0;
}

int run_list(const BaselineArgs& a) {
  const std::string library = diag::baseline_library(a.library);
  auto list = diag::list_baselines(library);
  if (!list.ok()) return report_failure("baseline", list.status());
  if (a.json) {
    std::cout << nlohmann::ordered_json(*list).dump(1) << std::endl;
    return 0;
  }
  std::cout << "baselines in " << library << ": " << list->size() << "\n";
  for (const auto& b : *list) {
    if (b.contains("error")) {
      std::cout << "  " << text_of(b, "name") << "  (unreadable: " << text_of(b, "error") << ")\n";
      continue;
    }
    const auto& id = b["identity"];
    std::cout << "  " << text_of(b, "name") << "  saved " << text_of(b, "saved_at") << "  "
              << (id.contains("prompts") ? id["prompts"].size() : 0) << " prompt(s)  dtype " << text_of(id, "dtype")
              << "  activations " << text_of(b, "activations") << "  from " << text_of(b, "source_run") << "\n";
  }
  return 0;
}

int run_show(const BaselineArgs& a) {
  const std::string library = diag::baseline_library(a.library);
  auto b = diag::read_baseline(library, a.name);
  if (!b.ok()) return report_failure("baseline", b.status());
  if (a.json) {
    std::cout << b->dump(2) << std::endl;
    return 0;
  }
  const auto& id = (*b)["identity"];
  const auto& rec = (*b)["recorded"];
  std::cout << "baseline '" << a.name << "' in " << library << "\n  saved " << text_of(*b, "saved_at") << " from "
            << text_of(*b, "source_run") << ", activations " << text_of(*b, "activations") << "\n"
            << "must match:\n  model: config.json xxh64 " << text_of(id["model"], "config_xxh64") << ", "
            << text_of(id["model"], "tensors") << " tensors\n";
  for (const auto& f : id["model"]["files"])
    std::cout << "    shard " << text_of(f, "name") << ": " << text_of(f, "bytes") << " bytes, header xxh64 "
              << text_of(f, "header_xxh64") << "\n";
  std::cout << "  dtype: " << text_of(id, "dtype") << "\n  dump.activations: " << id["dump"].dump()
            << "\n  generate: " << id["generate"].dump() << "\n  prompts:";
  for (const auto& p : id["prompts"]) std::cout << " " << text_of(p, "id") << " (" << text_of(p, "tokens") << " tokens)";
  std::cout << "\nrecorded (may differ):\n";
  for (auto it = rec.begin(); it != rec.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << "\n";
  return 0;
}

}  // namespace

void add_baseline_command(CLI::App& app, Commands& commands) {
  auto a = std::make_shared<BaselineArgs>();
  CLI::App* cmd = app.add_subcommand("baseline", "The baseline library: save a passing run, list, show");
  cmd->require_subcommand(1);
  const std::string lib_help = std::string("Baseline library folder (default: $") + diag::kBaselineLibraryEnv +
                               ", else ./" + diag::kDefaultBaselineLibrary + ")";
  CLI::App* save = cmd->add_subcommand("save", "Store a run that passed as LIBRARY/NAME (replacing NAME says what changed)");
  save->add_option("run_dir", a->run_dir, "Run folder of a run that passed (checklist.json exit_code 0)")->required();
  save->add_option("--name", a->name, "Baseline name: letters, digits, '.', '_', '-'")->required();
  save->add_option("--library", a->library, lib_help);
  save->add_option("--activations", a->activations, "stats or full (default: as the run dumped them)")
      ->check(CLI::IsMember({"stats", "full"}));
  save->callback([&commands, a] { commands.action = [a] { return run_save(*a); }; });
  CLI::App* list = cmd->add_subcommand("list", "List the baselines of the library");
  list->add_option("--library", a->library, lib_help);
  list->add_flag("--json", a->json, "Print every baseline.json as one JSON list");
  list->callback([&commands, a] { commands.action = [a] { return run_list(*a); }; });
  CLI::App* show = cmd->add_subcommand("show", "Show one baseline: what must match and what is recorded");
  show->add_option("name", a->name, "Baseline name")->required();
  show->add_option("--library", a->library, lib_help);
  show->add_flag("--json", a->json, "Print its baseline.json");
  show->callback([&commands, a] { commands.action = [a] { return run_show(*a); }; });
}

}  // namespace dayzero::cli
