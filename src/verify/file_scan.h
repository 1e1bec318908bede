// One file of a verify, streamed: a reader thread fills large blocks while this thread
// computes the file's SHA-256, validates its safetensors header, and walks its tensors in file
// order (XXH64 of each, and the value scans asked for).
#pragma once

#include <string>

#include "verify/progress.h"
#include "verify/results.h"

namespace dayzero::verify {

// The results of dir/name. Read and header errors are recorded in the result, not returned.
FileResult scan_file(const std::string& dir, const std::string& name, const VerifyOptions& o, VerifyProgress& progress);

}  // namespace dayzero::verify
