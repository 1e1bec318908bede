// Expected SHA-256 digests of a checkpoint's files, from Hugging Face's own records: Git-LFS
// pointer files (`version https://git-lfs.github.com/spec/v1`, `oid sha256:<hex>`, `size N`),
// one per file or several concatenated with `== <file name>` lines before each, or a plain
// `sha256sum` list (`<hex>  <name>`, `<hex> *<name>` for binary mode). Parsing only: the
// comparison with the files is verify.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dayzero::verify {

struct ExpectedHash {
  std::string name;             // file name relative to the model folder (a path's last part)
  std::string sha256;           // 64 lowercase hex digits
  std::optional<uint64_t> size; // LFS pointers give the size; sha256sum lists do not
};

// Parses text (source names the file in messages). name_if_single: the name given to the one
// entry of a lone LFS pointer without a `==` line (a pointer file standing in for the shard
// itself); empty refuses such a pointer. Errors (Corrupt, naming the source and line): a line
// that is none of the forms above, a digest that is not 64 hex digits, an LFS pointer without
// its oid, a size that is not a number, a name given twice, an empty or mixed-format text.
Result<std::vector<ExpectedHash>> parse_expected_hashes(std::string_view text, const std::string& source,
                                                        const std::string& name_if_single = "");

// path: a file in one of the forms above, or a folder of LFS pointer files named like the
// shards (`git lfs` clone without smudge): each *.safetensors in it is one pointer. Errors as
// parse_expected_hashes, plus NotFound / InvalidArgument / IoError of the read (naming the path).
Result<std::vector<ExpectedHash>> read_expected_hashes(const std::string& path);

}  // namespace dayzero::verify
