// The values a verify produces and passes between its parts (file scan, gather, checks,
// manifest, report): options, per-file and per-tensor results, findings, the report; and their
// JSON form for the gather between ranks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::verify {

// |x| above this (and finite) is an absurd magnitude for a weight: trained weights and norms
// stay within a few hundred; 1e4 leaves two orders of magnitude of margin.
inline constexpr double kDefaultRangeLimit = 1e4;
inline constexpr size_t kDefaultBlockBytes = 16ull << 20;

struct ScanOptions {
  bool nan = false, inf = false, range = false;  // range also reports all-zero tensors
  double range_limit = kDefaultRangeLimit;
  bool any() const { return nan || inf || range; }
};

// "nan,inf,range" -> ScanOptions. InvalidArgument naming an unknown item.
Result<ScanOptions> parse_scan_list(const std::string& list);

struct VerifyOptions {
  std::string model_dir;
  std::string hashes_path;    // --hashes: LFS pointers or a sha256sum list (expected_hashes.h)
  std::string manifest_in;    // --manifest: a manifest from an earlier --write-manifest
  std::string manifest_out;   // --write-manifest
  ScanOptions scan;
  bool structure_only = false;  // headers, inventory, sizes: no tensor byte is read
  size_t block_bytes = kDefaultBlockBytes;
};

struct TensorResult {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0, nbytes = 0;  // absolute in the file
  uint64_t xxh64 = 0;               // of the tensor's bytes (not in structure-only mode)
  int64_t nan = 0, inf = 0, out_of_range = 0;  // with the scan
  bool all_zero = false;                       // with --scan range
};

struct FileResult {
  std::string name;  // relative to the model folder
  bool present = true;
  int rank = -1;     // the rank that read it
  uint64_t bytes = 0;
  double seconds = 0;
  std::string sha256;        // empty in structure-only mode or when unreadable
  std::string header_error;  // the header parser's message, empty when valid
  std::string read_error;
  std::vector<TensorResult> tensors;  // sorted by offset
};

struct Finding {
  std::string kind;  // hash_mismatch, size_mismatch, missing_file, bad_header, read_error, missing_tensor,
                     // unknown_tensor, unindexed_tensor, wrong_shape, wrong_dtype, nan, inf, out_of_range,
                     // tensor_changed, header_changed; notes: mtp, all_zero, no_expected_hash, extra_file,
                     // not_a_shard
  std::string file, tensor, detail;
  bool error = true;  // false: listed for the reader, does not fail the verify
};

struct RankTime {
  int rank = 0, files = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

struct Report {
  std::string model_dir;
  int world_size = 1;
  std::string sha256_impl;
  std::string inventory;  // "adapter <family>" or "index only (<why>)"
  std::string expected;   // where the expected hashes came from, "" when none
  bool structure_only = false;
  std::vector<FileResult> files;  // sorted by name
  std::vector<Finding> findings;  // sorted by file, tensor, kind
  std::vector<RankTime> ranks;
  uint64_t total_bytes = 0;
  double wall_seconds = 0;  // slowest rank, from the start of reading to the gather
  int errors() const;
  int exit_code() const { return errors() > 0 ? 1 : 0; }
};

// 16 lowercase hex digits.
std::string hex64(uint64_t v);

// One file's results as the ranks exchange them (and back).
nlohmann::json file_to_json(const FileResult& f);
FileResult file_from_json(const nlohmann::json& j);

}  // namespace dayzero::verify
