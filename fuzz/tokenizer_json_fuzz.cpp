// Fuzz target: tokenizer.json through Tokenizer::from_json, then an encode and a decode of a
// fixed mixed-script text with every id it produced. Accepted tokenizers must give ids the
// decoder can take back without crashing.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  auto t = tokenizer::Tokenizer::from_json(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  const auto ids = (*t)->encode("Hello, world! 123 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd <|endoftext|>\n\t  x");
  (void)(*t)->decode(ids, false);
  (void)(*t)->decode(ids, true);
  return 0;
}
