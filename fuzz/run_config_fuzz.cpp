// Fuzz target: run-config YAML through parse_run_config (YAML -> structs -> validate()), with
// no base folder so no path is resolved against the disk.
#include <cstdint>
#include <string>

#include "config/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dayzero;
  (void)config::parse_run_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml", "");
  return 0;
}
