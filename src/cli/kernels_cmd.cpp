// dayzero kernels: which CPU this is, which CPU kernel paths it can run (the built-in GEMM
// kernel's instruction sets, the large-M libraries) and which one a run would take with the
// environment as it is (DAYZERO_CPU_ISA, DAYZERO_GEMM, DAYZERO_GEMM_LARGE_M). `--check` exits 2
// naming the variable when the environment asks for a path this machine cannot run, which is
// how the tests tell a path to skip from a path that failed.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kernels/cpu/gemm.h"

namespace dayzero::cli {
namespace {

namespace gemm = kernels::cpu::gemm;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

int run_kernels(bool check, bool list) {
  const std::string refused = gemm::kernel_path_request_error();
  if (check) {
    if (!refused.empty()) {
      std::cerr << "dayzero kernels: kernel path not runnable here: " << refused << std::endl;
      return 2;
    }
    return 0;
  }
  std::vector<std::string> isas, large;
  for (const gemm::BuiltinIsa& isa : gemm::builtin_isas())
    if (gemm::cpu_runs(isa)) isas.push_back(isa.name);
  std::vector<std::string> notes;
  for (const gemm::LargeMPath& p : gemm::large_m_paths(&notes)) large.push_back(p.id);
  if (list) {
    for (const std::string& isa : isas) std::cout << "isa=" << isa << "\n";
    for (const std::string& id : large) std::cout << "large_m=" << id << "\n";
    return 0;
  }
  std::cout << "cpu: " << cpu_model_name() << ", " << gemm::detect_isa().describe() << "\n";
  std::cout << "built-in GEMM instruction sets this CPU runs (DAYZERO_CPU_ISA):";
  for (const std::string& isa : isas) std::cout << " " << isa;
  std::cout << "\nlarge-M GEMM paths that load and verify here (DAYZERO_GEMM_LARGE_M):";
  for (const std::string& id : large) std::cout << " " << id;
  std::cout << "\n";
  for (const std::string& n : notes) std::cout << "  not available: " << n << "\n";
  if (!refused.empty()) {
    std::cerr << "dayzero kernels: " << refused << std::endl;
    return 2;
  }
  std::cout << "a run takes: " << kernels::cpu::gemm_info().path << "\n";
  return 0;
}

}  // namespace

void add_kernels_command(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("kernels", "Show this CPU and the CPU kernel paths it can run, and the one a run takes");
  auto check = std::make_shared<bool>(false), list = std::make_shared<bool>(false);
  cmd->add_flag("--check", *check, "Exit 2, naming the variable, when the environment asks for a path this CPU cannot run");
  cmd->add_flag("--list", *list, "Print the paths this machine runs, one per line (isa=NAME, large_m=ID)");
  cmd->callback([&commands, check, list] { commands.action = [check, list] { return run_kernels(*check, *list); }; });
}

}  // namespace dayzero::cli
