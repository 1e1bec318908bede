// The verify report as JSON and as the terminal table.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "verify/results.h"

namespace dayzero::verify {

// The report as JSON (timings under "seconds", "wall_seconds", "ranks", "throughput_bytes_per_s").
nlohmann::json to_json(const Report& r);
// The terminal table: one line per file, the findings, throughput and per-rank time.
std::string to_text(const Report& r);

}  // namespace dayzero::verify
