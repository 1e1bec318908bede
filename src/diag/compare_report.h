// Presentation of a CompareResult (compare_run.h): a terminal table, a JSON document and an
// HTML page with per-layer error curves as inline SVG. Formatting only: no verdicts are made
// here.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"
#include "diag/compare_run.h"

namespace dayzero::diag {

// Per prompt and phase, one row per unit (embed, each layer, final_norm, logits) showing its
// worst tensor, then the outputs and the verdict.
std::string format_compare_table(const CompareResult& r);

// Everything: every tensor's metrics, blame, outputs, tolerance. Infinite figures are the
// string "inf" (JSON has no infinity).
nlohmann::json compare_to_json(const CompareResult& r);

// One SVG per phase: x the units in forward order, y log10 of the unit's worst relative L2, one
// polyline per prompt (class "curve", data-prompt), the base tolerance as a band, the blamed
// unit of each prompt marked (class "blamed").
std::string compare_svg(const CompareResult& r, const std::string& phase);

// Writes dir/compare.html (the table, the curves, the outputs) and dir/compare.json, creating
// dir. IoError naming the file when a write fails.
Status write_compare_report(const CompareResult& r, const std::string& dir);

}  // namespace dayzero::diag
