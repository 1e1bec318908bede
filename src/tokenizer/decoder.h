// Decoders of tokenizer.json ("decoder" key): ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, BPEDecoder and Sequence. A decoder rewrites the list of token strings; the tokenizer
// joins the result. Not supported: WordPiece, CTC (load fails with Unsupported).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dayzero::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of the chain, as `decode_chain` in `tokenizers`: tokens in, tokens out.
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Builds the decoder described by `spec`; JSON null yields nullptr (tokens joined by " ").
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& spec);

}  // namespace dayzero::tokenizer
