// The verify manifest: every file's SHA-256 and every tensor's XXH64, written by one verify
// (--write-manifest) and compared by a later one (--manifest), which then names the tensor whose
// bytes changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "verify/results.h"

namespace dayzero::verify {

inline constexpr const char* kManifestFormat = "dayzero-verify-manifest";

struct ManifestFile {
  uint64_t size = 0;
  std::string sha256;
  std::map<std::string, uint64_t> tensor_xxh64;
};

// A manifest by file name. InvalidArgument / NotFound naming the path.
Result<std::map<std::string, ManifestFile>> read_manifest(const std::string& path);
// Writes r's files and tensors. IoError naming the path.
Status write_manifest(const std::string& path, const Report& r);

}  // namespace dayzero::verify
