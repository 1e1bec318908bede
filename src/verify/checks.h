// The checks of a verify over the gathered results: expected hashes (an LFS pointer or
// sha256sum list), a manifest, the index, the adapter's tensor inventory (names, shapes,
// dtypes), the value scans; each a Finding.
#pragma once

#include <map>
#include <string>

#include "verify/expected_hashes.h"
#include "verify/file_assignment.h"
#include "verify/manifest.h"
#include "verify/results.h"

namespace dayzero::verify {

struct Expectations {
  std::map<std::string, ExpectedHash> hashes;           // --hashes
  std::map<std::string, ManifestFile> manifest;         // --manifest
};

// Appends rep's findings, sorted by file, tensor, kind.
void check(Report& rep, const CheckpointFiles& files, const Expectations& ex, const VerifyOptions& o);

}  // namespace dayzero::verify
