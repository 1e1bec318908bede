// Compares two finished runs key by key: indexes every rank file of each run folder (any plan,
// any world size), matches activations by logical key, measures each tensor and each prompt's
// outputs (compare.h), and finds per prompt and phase the first divergence and the layer to
// blame. Not the presentation (compare_report.h) and not the CLI (cli/compare_cmd.cpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "diag/compare.h"
#include "diag/compare_tolerance.h"
#include "dump/dump_reader.h"

namespace dayzero::diag {

// Where every dataset of one run lives. Keys: "<prompt>/<phase>/<name>" for activations.
struct RunIndex {
  std::string dir;
  std::vector<dump::DumpReader> files;            // every rank-*.h5, in rank order
  std::map<std::string, int> activations;         // key -> index into files
  std::map<std::string, int> outputs;             // prompt id -> index into files
  std::vector<std::string> incomplete;            // files whose complete attribute is 0
  std::string compute_dtype;                      // model.dtype of the run config, or the backend's default
  int64_t world_size = 0;
  // A replay dump (root attributes replay_layer_begin/end): the decoder layers [first, second) it ran.
  std::optional<std::pair<int, int>> replay_layers;
};

// Opens every rank-NNNNN.h5 of dir. NotFound when dir has none; InvalidArgument naming the file
// when a file is incomplete (unless allow_incomplete), when rank files are missing from the
// world size the files record (unless allow_incomplete), when two files write one key, or when
// its files disagree on the replayed layers.
Result<RunIndex> open_run(const std::string& dir, bool allow_incomplete);

// The order a forward pass produces names in, for sorting: vision layers, projector_out,
// merged_embed, embed, layers by index and point (attn_norm, attn_out, ffn_norm, router_logits,
// topk_ids, ffn_out, layer_out), final_norm, logits; unknown names last, by name.
bool forward_before(const std::string& x, const std::string& y);
// The unit a name belongs to for blame: "layers.3", "vision.layers.0", or the name itself.
std::string unit_of(const std::string& name);

enum class Verdict { kOk, kBlamed, kBroken, kInherited };
const char* verdict_name(Verdict v);

struct TensorResult {
  std::string name;
  bool stats = false;             // compared as stats vectors (either side was dumped in stats mode)
  std::vector<int64_t> shape;     // of a's dataset
  int64_t rows_compared = 0;      // decode: rows before the first differing generated token
  TensorMetrics metrics;          // over the values (empty when stats)
  double error = 0;               // what the tolerance applies to: rel_l2, stats error or id mismatch
  double tolerance = 0;
  const char* measure = "rel_l2";  // "rel_l2", "stats", "id_mismatch"
  bool broken = false;            // error > tolerance
  Verdict verdict = Verdict::kOk;
};

struct GroupResult {  // one prompt and phase
  std::string prompt, phase;
  std::vector<TensorResult> tensors;  // forward order
  std::optional<size_t> first_break;  // index into tensors
  std::string blamed_unit;            // "layers.3", "embed"; empty when none broke
  std::string blamed_point;           // the first broken name in that unit
  std::vector<std::string> inherited_units;
  std::string note;                   // e.g. decode rows cut at the first differing token
};

struct OutputResult {
  std::string prompt;
  std::vector<int32_t> generated_a, generated_b;
  int64_t first_diff = -1;     // first differing generated position; -1 when equal
  bool near_tie = false;       // the top-1/top-2 gap at first_diff is within near_tie
  double tie_gap = 0;          // that gap (logits), on side a
  LogitMetrics logits;         // of logits_last
  std::optional<double> nll_a, nll_b;
  bool pass = true;
  std::vector<std::string> reasons;  // why it failed or what is noteworthy
};

// One prompt's outputs: generated-token agreement (the first differing position, a near-tie
// when the top-1/top-2 gap of step_topk_logits there is within tol.near_tie on either side),
// logits_last metrics and the reference NLL difference; pass is false for a real difference.
OutputResult compare_outputs(const dump::OutputRecord& a, const dump::OutputRecord& b, const OutputTolerance& tol);

struct CompareResult {
  std::string run_a, run_b;
  TolerancePolicy tolerance;
  std::vector<GroupResult> groups;  // by prompt, then phase (vision, prefill, decode)
  std::vector<OutputResult> outputs;
  std::vector<std::string> only_in_a, only_in_b;  // non-empty only with allow_incomplete
  // Set when either run is a replay: only the prefill points of layers [first, second) were compared.
  std::optional<std::pair<int, int>> replay_layers;
  bool pass = true;
};

// Compares every matched key. InvalidArgument (exit 2) when nothing matched, or, unless
// allow_incomplete, when one side lacks keys the other has (the message lists them); with
// allow_incomplete those keys are listed in the result and the rest compared. When either run
// is a replay (RunIndex::replay_layers), the keys of both are first restricted to the prefill
// activations of the replayed layers and the outputs are left out, so a replayed key missing on
// either side is still an error; two replays of different layers are InvalidArgument. A shape mismatch
// of a matched key is a broken tensor (infinite error), not an input error.
Result<CompareResult> compare_runs(const RunIndex& a, const RunIndex& b, const TolerancePolicy& tol,
                                   bool allow_incomplete);

}  // namespace dayzero::diag
