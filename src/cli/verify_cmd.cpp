// dayzero verify MODEL_DIR [--hashes FILE] [--scan nan,inf,range] [--write-manifest FILE]
// [--manifest FILE] [--structure-only] [--json]: is the checkpoint whole and what its model
// says it is, alone or under mpirun (files divided among the ranks). Rank 0 prints the one
// report; exit 0 clean, 1 any finding, 2 not readable as a checkpoint (verify/verify.h).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/job_command.h"
#include "verify/verify.h"

namespace dayzero::cli {

void add_verify_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<verify::VerifyOptions>();
  auto scan = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto block_mib = std::make_shared<size_t>(verify::kDefaultBlockBytes >> 20);
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check a checkpoint's files (SHA-256, headers, tensor inventory, values), spread over the MPI ranks");
  cmd->add_option("model", o->model_dir, "Model folder (model.safetensors or model.safetensors.index.json)")->required();
  cmd->add_option("--hashes", o->hashes_path,
                  "Expected SHA-256s: Git-LFS pointer file(s) (one, a folder of them, or concatenated with '== name' "
                  "lines) or a sha256sum list");
  cmd->add_option("--scan", *scan, "Value scans, comma-separated: nan, inf, range (|x| > --range-limit; all-zero tensors)");
  cmd->add_option("--range-limit", o->scan.range_limit, "Absurd magnitude for --scan range (default 1e4)");
  CLI::Option* wm = cmd->add_option("--write-manifest", o->manifest_out,
                                    "Write per-file SHA-256 and per-tensor XXH64 (JSON) for a later --manifest");
  cmd->add_option("--manifest", o->manifest_in, "Compare with a manifest from an earlier verify; names changed tensors");
  CLI::Option* so = cmd->add_flag("--structure-only", o->structure_only,
                                  "Headers, inventory and sizes only: no tensor byte is read (sparse layouts)");
  wm->excludes(so);
  cmd->add_option("--block-mib", *block_mib, "Read size in MiB (default 16)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", *json, "Print the report as JSON");
  cmd->callback([&commands, o, scan, json, block_mib] {
    commands.action = mpi_action([o, scan, json, block_mib](comm::MpiEnv& env) {
      if (!scan->empty()) {
        auto s = verify::parse_scan_list(*scan);
        if (!s.ok()) {
          if (env.rank() == 0) std::cerr << "dayzero verify: " << s.status().message() << std::endl;
          return 2;
        }
        s->range_limit = o->scan.range_limit;
        o->scan = *s;
        if (o->structure_only) {
          if (env.rank() == 0) std::cerr << "dayzero verify: --scan reads tensor bytes; --structure-only reads none" << std::endl;
          return 2;
        }
      }
      o->block_bytes = *block_mib << 20;
      auto r = verify::verify_checkpoint(*o);
      if (!r.ok()) {
        if (env.rank() == 0) std::cerr << "dayzero verify: " << r.status().message() << std::endl;
        return r.status().exit_code();
      }
      if (env.rank() == 0) {
        if (*json) std::cout << verify::to_json(*r).dump(2) << std::endl;
        else std::cout << verify::to_text(*r) << std::flush;
      }
      return r->exit_code();
    });
  });
}

}  // namespace dayzero::cli
