// Helpers shared by the fuzz targets: a per-process scratch folder and writing one input to a
// file there, for parsers whose contract is a path (they refuse what is not a regular file,
// so an in-memory buffer cannot stand in). Not used by the project's own code.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace dayzero::fuzz {

// A folder under $TMPDIR (or /tmp) owned by this process, created on first use and removed
// when the process exits normally (a crash leaves it, next to the input that caused it).
inline const std::filesystem::path& scratch() {
  struct Scratch {
    std::filesystem::path dir;
    Scratch() {
      const char* t = std::getenv("TMPDIR");
      dir = std::filesystem::path(t && *t ? t : "/tmp") / ("dayzero-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch s;
  return s.dir;
}

inline void write_bytes(const std::filesystem::path& p, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace dayzero::fuzz
