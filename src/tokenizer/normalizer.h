// Normalizers of tokenizer.json ("normalizer" key): NFC/NFD/NFKC/NFKD, Lowercase, Prepend,
// Replace, Strip, StripAccents, ByteLevel and Sequence of those.
// Not supported (load fails with Unsupported): Precompiled, BertNormalizer, Nmt.
// No offset alignment is tracked: dayzero needs ids, not character offsets.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // REQUIRES: text is valid UTF-8. Returns valid UTF-8.
  virtual std::string normalize(std::string text) const = 0;
};

// Builds the normalizer described by `spec`; a JSON null yields nullptr (no normalizer).
// Errors: Unsupported naming an unknown "type", Corrupt for a malformed entry.
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& spec);

}  // namespace dayzero::tokenizer
