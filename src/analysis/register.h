// A team's model register: one YAML entry per model (name, source, UTC date, XXH64 of the
// config.json bytes, structure, features with status and evidence, parameters, quantization,
// weight memory per precision), kept up to date by `dayzero inspect --register FILE.yaml`,
// and its Markdown page (`--markdown`). The file is a YAML sequence of maps; anything else is
// refused and left as it was. Writes go to a temp file renamed into place.
#pragma once

#include <yaml-cpp/yaml.h>

#include <ostream>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "core/status.h"

namespace dayzero::analysis {

// Who a model is in the register. name: the folder's name; for a file, its parent folder's
// name when it is called config.json, else the file name without .json; `_name_or_path` of the
// config when neither gives one. config_hash: "xxh64:" + 16 hex digits of the config.json bytes.
struct ModelIdentity {
  std::string name, name_from, source, config_path, config_hash;
  std::vector<std::string> architectures;  // config.json's list, in order
};
// Errors: NotFound / IoError naming config.json; Corrupt when it is not JSON (or nested too
// deep); InvalidArgument when no name can be found or config.json is not a regular file.
Result<ModelIdentity> identify_model(const std::string& path);

// date: UTC ISO 8601 (utc_iso8601 in core/clock.h).
YAML::Node register_entry(const Analysis& a, const ModelIdentity& id, const std::string& date);

// An absent or empty file is an empty register. Errors (InvalidArgument, naming the file): YAML
// that does not parse, a document that is not a sequence, an entry that is not a map with a
// scalar name.
Result<std::vector<YAML::Node>> load_register(const std::string& path);

enum class Upsert { kAdded, kSameHash, kByName };
const char* upsert_name(Upsert u);  // "added", "updated (same name and config hash)", ...
// Replaces the first entry with the same name and config_hash, else the first with the same
// name (the config changed), else appends. Other entries are left untouched.
Upsert upsert_entry(std::vector<YAML::Node>& entries, const YAML::Node& entry);

// Writes PATH.tmp.<pid> beside PATH and renames it over PATH. Errors: IoError naming the file.
Status write_register(const std::string& path, const std::vector<YAML::Node>& entries);

// A heading per entry, its structure, parameters, memory and a feature table; the features that
// need a new block (or are unknown) are named again under the table.
void print_markdown(std::ostream& o, const std::vector<YAML::Node>& entries);

}  // namespace dayzero::analysis
