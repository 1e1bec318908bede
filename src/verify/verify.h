// `dayzero verify`: is a checkpoint folder whole and what its model says it is. The shard
// files are divided among the MPI ranks by bytes (file_assignment.h); each rank streams its
// files with large reads (no mmap) and computes a SHA-256 per file and an XXH64 per tensor,
// validates every header, and optionally scans values (file_scan.h). The results are gathered
// (results.h), checked against the expected hashes, a manifest (manifest.h), the index and the
// adapter's tensor inventory (checks.h), and turned into one report (report.h). This file is
// the MPI orchestration. Not the loader's per-slice checksums (checkpoint/load.h), which depend
// on the plan.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"
#include "verify/file_assignment.h"
#include "verify/report.h"
#include "verify/results.h"

namespace dayzero::verify {

// Collective over MPI_COMM_WORLD (MPI initialised by the caller; one process is a world of 1):
// every rank returns the same report. Errors (exit 2, the same on every rank): the folder has
// neither model.safetensors nor an index, the index, hash list or manifest is malformed, no
// shard could be read as safetensors. Findings are not errors: Report::exit_code() says them.
// Rank 0 writes options.manifest_out when set (IoError when it cannot).
Result<Report> verify_checkpoint(const VerifyOptions& options);

}  // namespace dayzero::verify
