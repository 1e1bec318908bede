// dayzero preflight [CONFIG.yaml]: checks the cluster before the job, launched as the job would
// be (src/preflight/, docs/preflight.md). Options only; the checks are the preflight library's.
#include <memory>

#include "cli/commands.h"
#include "cli/job_command.h"
#include "preflight/preflight.h"

namespace dayzero::cli {

void add_preflight_command(CLI::App& app, Commands& commands) {
  CLI::App* cmd = app.add_subcommand(
      "preflight",
      "Check the cluster before a job: each rank's inventory compared across ranks (versions, "
      "environment, interfaces, filesystems), then a GEMM, a read, the plan's collectives and the links "
      "between nodes, each as a ratio to its peers' median. Exit 0 consistent, 1 a mismatch or an outlier, "
      "2 bad input, 3 a hang or fault");
  auto a = std::make_shared<preflight::PreflightArgs>();
  cmd->add_option("config", a->config_path,
                  "Run config of the job: its plan's groups are tested and its checkpoint read (optional)");
  cmd->add_option("--dump-dir", a->dump_dir, "Folder for preflight.json (default runs/preflight-{time})");
  auto fraction = std::make_shared<double>(0);
  auto read_mib = std::make_shared<int64_t>(0), coll_mib = std::make_shared<int64_t>(0);
  auto timeout = std::make_shared<double>(0);
  CLI::Option* fo = cmd->add_option("--outlier-fraction", *fraction,
                                    "A figure below this fraction of its peers' median is an outlier "
                                    "(default 0.7, or preflight.outlier_fraction)");
  CLI::Option* ro = cmd->add_option("--read-mib", *read_mib, "MiB read per node (default 64, or preflight.read_mib)");
  CLI::Option* co = cmd->add_option("--collective-mib", *coll_mib,
                                    "MiB per collective and per pairwise transfer (default 4, or preflight.collective_mib)");
  CLI::Option* to = cmd->add_option("--timeout", *timeout,
                                    "Seconds one communication op may take before the watchdog ends the job "
                                    "(default 60, or watchdog.collective_timeout_s)");
  cmd->add_option("--threads", a->threads, "GEMM threads per rank (default: cores / ranks on the node)");
  cmd->callback([&commands, a, fraction, read_mib, coll_mib, timeout, fo, ro, co, to] {
    if (*fo) a->outlier_fraction = *fraction;
    if (*ro) a->read_mib = *read_mib;
    if (*co) a->collective_mib = *coll_mib;
    if (*to) a->timeout_s = *timeout;
    a->version = DAYZERO_VERSION;
    commands.action = mpi_action([a](comm::MpiEnv& env) { return preflight::run_preflight(env, *a); });
  });
}

}  // namespace dayzero::cli
