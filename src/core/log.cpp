// Logger set-up: stderr sink, rank-tagged pattern.
#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace dayzero {

void init_logging(int rank, int world_size) {
  auto logger = spdlog::stderr_color_mt("dayzero");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e dayzero r" + std::to_string(rank) + "] %^%l%$ %v");
  spdlog::level::level_enum level = rank == 0 ? spdlog::level::info : spdlog::level::warn;
  if (const char* env = std::getenv("DAYZERO_LOG")) level = spdlog::level::from_str(env);
  spdlog::set_level(level);
  (void)world_size;
}

}  // namespace dayzero
