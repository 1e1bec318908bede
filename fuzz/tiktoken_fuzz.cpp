// Fuzz target: a tiktoken rank file (Kimi-K2's tiktoken.model) through
// Tokenizer::from_tiktoken, then an encode and a decode of a fixed text.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  auto t = tokenizer::Tokenizer::from_tiktoken(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  const auto ids = (*t)->encode("Hello, world! 123 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd [BOS]\n  x");
  (void)(*t)->decode(ids, false);
  return 0;
}
