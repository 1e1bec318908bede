// Post-processors of tokenizer.json ("post_processor" key) for a single sequence:
// TemplateProcessing, ByteLevel (ids unchanged), RobertaProcessing, BertProcessing, Sequence.
// They add the special tokens of add_special_tokens=true. Pairs of sequences, type ids and
// offsets are not modelled: dayzero encodes one prompt at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Returns the ids of one encoded sequence with the processor's special tokens around them.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

// Builds the post-processor described by `spec`; JSON null yields nullptr (ids unchanged).
Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& spec);

}  // namespace dayzero::tokenizer
