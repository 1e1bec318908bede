// Tolerances of `dayzero compare`: the presets f32, bf16 and fp8 (docs/compare.md gives each
// number's reason) and a YAML file that starts from a preset and overrides points. Not the
// comparison itself (compare_run.h).
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace dayzero::diag {

// What one activation may differ by.
struct PointTolerance {
  double rel_l2 = 0;       // relative L2 (or the stats error, compare_stats) may not exceed this
  double id_mismatch = 0;  // topk_ids: share of rows whose expert set may differ
};

// What a prompt's outputs may differ by.
struct OutputTolerance {
  double logits_nmse = 0;  // NMSE of logits_last
  double logits_kl = 0;    // KL(a || b) of logits_last, nats
  double near_tie = 0;     // a top-1/top-2 logit gap <= near_tie * max(1, |top-1 logit|) is a tie
  double nll = 0;          // |reference_nll_a - reference_nll_b|, nats/token
};

struct TolerancePolicy {
  std::string name;                                  // "f32", or "FILE (from bf16)"
  PointTolerance base;                               // every point not named below
  std::map<std::string, PointTolerance> by_point;    // by point: "ffn_out", "logits"
  std::map<std::string, PointTolerance> by_name;     // by full name: "layers.3.ffn_out"
  OutputTolerance outputs;

  // by_name, else by_point (the name after "layers.{L}."), else base.
  PointTolerance for_name(const std::string& name) const;
};

// "f32", "bf16" or "fp8"; InvalidArgument naming the others for anything else.
Result<TolerancePolicy> tolerance_preset(const std::string& name);

// A YAML file:  preset: bf16            # optional, else default_preset
//               points: {default: {rel_l2: 1e-2}, ffn_out: {rel_l2: 5e-2},
//                        layers.3.ffn_out: {rel_l2: 0.1}, topk_ids: {id_mismatch: 0.01}}
//               outputs: {logits_nmse: 1e-4, logits_kl: 1e-4, near_tie: 1e-3, nll: 1e-3}
// Unknown keys and non-numbers are InvalidArgument naming the file and the key.
Result<TolerancePolicy> load_tolerance_file(const std::string& path, const std::string& default_preset);

// The preset for a run's compute dtype ("float32", "bfloat16", "float8_e4m3fn", ...): bf16 for
// 16-bit types, fp8 for 8-bit ones, f32 otherwise. looser_preset picks the wider of two.
std::string preset_for_dtype(const std::string& dtype);
std::string looser_preset(const std::string& a, const std::string& b);

}  // namespace dayzero::diag
