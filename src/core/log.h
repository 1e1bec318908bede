// Logging through spdlog with the MPI rank in every line ("[dayzero r3] ...").
// Rank 0 logs at info by default, other ranks at warn, so an 8-rank job stays readable;
// DAYZERO_LOG=debug|info|warn overrides for every rank.
#pragma once

#include <spdlog/spdlog.h>

namespace dayzero {
// Sets the pattern and level for this rank. Call once after MPI_Init (or with rank 0 alone).
void init_logging(int rank, int world_size);
}  // namespace dayzero

#define DZ_LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
#define DZ_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define DZ_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define DZ_LOG_ERROR(...) spdlog::error(__VA_ARGS__)
