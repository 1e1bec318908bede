// The per-rank HDF5 dump schema, version 1 (docs/design.md "Run folder and HDF5 schema"): names,
// constants and the plain records the writer takes and the reader gives back. No HDF5 here;
// dump_writer.h writes these, dump_reader.h reads them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dayzero::dump {

inline constexpr int64_t kSchemaVersion = 1;

// Phases under /activations/<prompt_id>/. Decode datasets grow one row per step.
inline constexpr const char* kPhasePrefill = "prefill";
inline constexpr const char* kPhaseDecode = "decode";
inline constexpr const char* kPhaseVision = "vision";

// Attribute on every stats dataset, naming its 8 columns; its presence marks "stats, not values".
inline constexpr const char* kStatsFieldsAttr = "fields";
inline constexpr const char* kStatsFields = "min,max,mean,std,abs_max,l2,nan_count,inf_count";
inline constexpr int64_t kStatsWidth = 8;

// Root attributes of a replay dump (`dayzero run --replay-layers A:B`): the source run folder
// as given and the replayed decoder layers [begin, end). Absent from every other dump.
inline constexpr const char* kAttrReplaySource = "replay_source";
inline constexpr const char* kAttrReplayLayerBegin = "replay_layer_begin";
inline constexpr const char* kAttrReplayLayerEnd = "replay_layer_end";

// Every root attribute but schema_version (always kSchemaVersion) and complete (0 at
// creation, 1 after DumpWriter::mark_complete()).
struct RootAttributes {
  std::string dayzero_version;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t dp = 1;
  int64_t pp = 1;
  int64_t tp = 1;
  int64_t ep = 1;
  int64_t etp = 1;
  std::string hostname;
  std::string device;           // "cpu", "cuda:3 (NVIDIA H200)"
  std::string backend;          // "cpu", "cuda"
  std::string model_config;     // config.json text
  std::string plan;             // plan JSON text
  std::string run_config;       // run config YAML text, as run
  std::string started_at;       // ISO 8601 UTC, "2026-11-29T15:04:05Z"
  int64_t clock_offset_ns = 0;  // this rank's CLOCK_REALTIME minus rank 0's
};

// One prompt's results, /outputs/<prompt_id>/.
struct OutputRecord {
  std::string prompt_id;
  std::vector<int32_t> prompt_ids;          // [n_prompt] as consumed, image placeholders expanded
  std::vector<int32_t> generated_ids;       // [n_generated]
  std::string text;                         // detokenized generated_ids
  std::vector<float> logits_last;           // [n_vocab] at the last prompt position
  int64_t topk = 0;                         // k of the two step_topk arrays
  std::vector<int32_t> step_topk_ids;       // [n_steps, topk] row-major
  std::vector<float> step_topk_logits;      // [n_steps, topk] row-major
  std::optional<double> reference_nll;      // mean NLL of a reference continuation
  std::optional<int64_t> reference_tokens;  // tokens that NLL is over
};

// One row of /weights: one tensor slice this rank read from the checkpoint.
struct WeightRow {
  std::string name;            // "model.layers.7.mlp.down_proj.weight"
  std::string file;            // "model-00003-of-00163.safetensors"
  std::string dtype;           // on-disk dtype, safetensors name: "BF16"
  std::vector<int64_t> shape;  // of the slice read, PyTorch order; stored as "[4096, 1024]"
  uint64_t offset = 0;         // first byte read, from the start of the file
  uint64_t bytes_read = 0;
  uint64_t ranges = 0;    // count of contiguous byte ranges read
  uint64_t checksum = 0;  // xxh64 of the bytes read, in file order
  int64_t nan_count = 0;
  int64_t inf_count = 0;
};

// A dataset read back: values row-major and the shape ([] for a scalar).
template <class T>
struct Array {
  std::vector<T> data;
  std::vector<int64_t> shape;
};
using FloatArray = Array<float>;
using DoubleArray = Array<double>;
using Int32Array = Array<int32_t>;

// "/activations/<prompt_id>/<phase>/<name>" and "/outputs/<prompt_id>".
std::string activation_path(const std::string& prompt_id, const std::string& phase,
                            const std::string& name);
std::string output_path(const std::string& prompt_id);

// (min, max, mean, std, abs_max, l2, nan_count, inf_count) of data[0..n), the order of
// kStatsFields. Moments are over the finite values only (std is the population std, l2 the
// root of the sum of squares); with no finite value min, max, mean and std are NaN and
// abs_max and l2 are 0. Accumulates in double.
std::array<double, 8> activation_stats(const float* data, int64_t n);

}  // namespace dayzero::dump
