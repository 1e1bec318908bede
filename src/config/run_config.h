// The run config: the YAML file of docs/design.md "Run config" read into plain structs, checked by
// validate(), plus the dump folder placeholders ({config}, {time}, {jobid}) and the dump point
// selection. It is not the plan (plan/ chooses omitted parallel sizes) and it does not touch
// the checkpoint, the tokenizer or MPI: every rank can parse the same text and get the same value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "topology/topology.h"

namespace dayzero::config {

enum class Backend { kAuto, kCpu, kCuda };
enum class CommKind { kAuto, kMpi, kNccl };
// What the planner counts for weights resident on the device.
enum class WeightsOnDevice { kAsStored, kBF16, kF32 };
enum class DumpPhase { kPrefill, kDecode, kBoth };
enum class DumpMode { kFull, kStats };  // stats: (min, max, mean, std, abs-max, l2, nan, inf)
enum class EventLogMode { kFull, kOff };      // dump.event_log: events/rank-N.jsonl written or not
enum class TimelineMode { kFull, kPhases };   // dump.timeline: every event in /timeline, or phases only

// The YAML spellings ("auto", "cuda", "as_stored", "both", "stats", ...).
const char* backend_name(Backend b);
const char* comm_name(CommKind c);
const char* weights_on_device_name(WeightsOnDevice w);
const char* dump_phase_name(DumpPhase p);
const char* dump_mode_name(DumpMode m);

struct ModelConfig {
  std::string path;             // resolved against the config's folder unless absolute
  std::string path_as_written;  // exactly as in the YAML
  // Compute dtype: kF32, kBF16 or kF16 ("float32", "bfloat16", "float16"); nullopt: the
  // backend's default (CPU float32, GPU bfloat16). validate() refuses anything but kF32 unless
  // backend is cuda: the CPU backend cannot honour it.
  std::optional<DType> dtype;
  WeightsOnDevice weights_on_device = WeightsOnDevice::kAsStored;
};

// Sizes the user fixed; nullopt (omitted, null or "auto") is chosen by the planner.
// When given: each >= 1, ep and etp divide tp, ep * etp == tp.
struct ParallelConfig {
  std::optional<int> dp, pp, tp, ep, etp;
};

// Overrides of topology discovery: a topology YAML, then the section's own keys
// (device_memory_gib, memory_fraction, nodes, gpus_per_node), read and checked by
// topology::parse_keys. On CPU device_memory_bytes is the per-rank budget.
struct TopologyConfig {
  std::optional<std::string> file;  // a topology YAML (topology/topology.h), resolved like model.path
  topology::Overrides keys;
};

struct LimitsConfig {
  int64_t max_prompt_tokens = 4096;
  // Largest width * height of a prompt image, checked from the file's header before it is
  // decoded (a decompression bomb is refused unread); 50 megapixels passes any photograph.
  int64_t max_image_pixels = 50000000;
};

// Checks on a prompt's generated output; failing one makes the run exit 1.
struct Expect {
  std::vector<std::string> contains;      // YAML: a string or a list of strings
  std::vector<std::string> not_contains;  // YAML: a string or a list of strings
  std::vector<int32_t> first_tokens;      // the first generated ids, in order
  bool empty() const { return contains.empty() && not_contains.empty() && first_tokens.empty(); }
};

// Exactly one of text and tokens is set.
struct Prompt {
  std::string id;  // unique; [A-Za-z0-9_.-]+, it names HDF5 groups
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> tokens;  // [n_tokens] ids, used as given (no BOS added)
  // A chat, as JSON text (a list of {role, content, ...}): rendered by the model's chat template as
  // the service renders a chat request (serve/chat_template.h), encoded without added special tokens.
  std::optional<std::string> messages_json;
  std::vector<std::string> images;             // PNG or JPEG files, resolved like model.path
  std::vector<std::string> images_as_written;
  Expect expect;
  // Free text kept for reports, e.g. the continuation a reference implementation produced.
  std::optional<std::string> reference;
};

struct GenerateConfig {
  int max_new_tokens = 16;     // 0: prefill only
  // Recorded only (it is echoed with the run config): decoding is greedy, so no random draw
  // exists for it to seed and it changes no output.
  std::optional<uint64_t> seed;
  bool stop_at_eos = true;
  int top_k_record = 5;        // k of step_topk_ids / step_topk_logits; 0: not recorded
  int max_batch = 8;           // sequences of one replica decoded together (and resident) at once
};

// Which activations are dumped. A point name is one of dump_point_names(); layer indices are
// HF-style (unpadded) and apply to text and vision layers alike.
struct DumpSelection {
  bool enabled = false;  // true when dump.activations is given (unless it says enabled: false)
  bool all_layers = true;
  std::vector<int> layers;  // sorted, unique; used when !all_layers
  bool all_points = true;
  std::vector<std::string> points;  // used when !all_points
  DumpPhase phase = DumpPhase::kPrefill;
  DumpMode mode = DumpMode::kFull;

  // False whenever !enabled, so an unwanted dump costs one call.
  bool wants_layer(int layer) const;
  bool wants_point(std::string_view point) const;  // "layer_out", "logits", ...
  bool wants_prefill() const;
  bool wants_decode() const;
  // A full dump key: "embed", "layers.7.attn_out", "vision.layers.3.layer_out", "logits", ...
  // Unknown shapes of key are not wanted.
  bool wants_key(std::string_view key) const;
};

struct DumpConfig {
  bool enabled = true;  // false: no per-rank HDF5 dumps (and activations.enabled is false too)
  std::string dir = "runs/{config}-{time}";  // as written, placeholders unexpanded; relative to cwd
  DumpSelection activations;
  // off: no events/ file. The flight-recorder ring (watchdog.ring_events) and the hang report
  // still hold the last events, and the report carries the rank's placement the log's meta
  // line would have; `dayzero timeline` has nothing to read (exit 2).
  EventLogMode event_log = EventLogMode::kFull;
  // phases: /timeline keeps only run phases and per-prompt prefill/decode events (no
  // collective or p2p rows), so its memory does not grow per op over a long run.
  TimelineMode timeline = TimelineMode::kFull;
};

// Seconds; 0 disables that watchdog.
struct WatchdogConfig {
  double collective_timeout_s = 300;
  double phase_timeout_s = 3600;
  // The flight recorder: how many of this rank's last events are held in memory (every event
  // passes through) and written, all of them, as last_events into the hang report.
  // 1 .. kMaxRingEvents.
  int64_t ring_events = 4096;
};
inline constexpr int64_t kMaxRingEvents = 1 << 20;

// `dayzero preflight` (src/preflight/, docs/preflight.md); `dayzero run` does not read it.
struct PreflightConfig {
  // A rank, node or link measuring below this fraction of its peers' median is an outlier.
  // 0 < outlier_fraction <= 1.
  double outlier_fraction = 0.7;
  int64_t read_mib = 64;        // read test: MiB per node of the checkpoint's shards (or a scratch file); >= 1
  int64_t collective_mib = 4;   // per collective and pairwise transfer; >= 1
};

// debug.stall (tests only): world rank `rank` sleeps forever, its heartbeat still beating,
// just before the op named by `before`: "<group kind> <op> #<seq>", e.g. "tp all_reduce #40",
// "pp send #3", "env agree #12", "setup cart_sub #1". group kind: world, tp, pp, dp, ep, etp,
// env (the world helpers of comm/mpi_env.h) or setup (the communicator set-up of
// comm/groups.cpp); op: the op as the timeline names it (all_reduce, all_gather,
// reduce_scatter, broadcast, send, recv, barrier, all_reduce_max, argmax, dispatch, combine
// (wide expert parallelism, group ep); env: agree,
// clock_offset, broadcast_string, all_gather_strings, all_reduce_min; setup: cart_create #0,
// cart_sub #1..#5 for tp, pp, dp, ep, etp); seq: the per-group
// sequence number the timeline records for it. If that seq is another op, nothing stalls.
struct StallConfig {
  int rank = 0;
  std::string before;  // as written
  // How long the rank pauses before entering the op; absent: for good. A pause lets a test
  // break something (a node's link) while the job is in a known phase.
  std::optional<double> seconds;
  std::string group, op;
  int64_t seq = 0;
};
// Parses the `before` grammar above into s->group, s->op, s->seq; InvalidArgument (the
// sentence without a key path) when it does not match.
Status parse_stall_target(const std::string& before, StallConfig* s);

struct RuntimeConfig {
  std::optional<int> threads;  // CPU threads per rank, >= 1; nullopt: runtime's choice
  std::optional<int> staging_mib;  // host staging for weight reads per rank, MiB (default 256)
  // The fixed reserve per rank the planner adds to its estimate (runtime, library workspaces,
  // fragmentation), MiB >= 0; nullopt: the planner's default (1 GiB), as `dayzero plan --headroom`.
  std::optional<int> headroom_mib;
};

// debug.perturb (tests only).
struct PerturbConfig {
  std::string point;   // a dump point produced by emit: "layers.3.ffn_out", "embed", "logits"
  double scale = 1.0;  // that tensor is multiplied by scale where it is produced (every rank)
  // Only in this repetition of `dayzero run --repeat N` (1-based); nullopt: in every one. A
  // perturbed later repetition is the negative control of the checklist's reproducibility line.
  std::optional<int> repetition;
};
// debug.image_patterns (tests only): prompt `prompt` gets one synthetic image per entry, a
// deterministic wave pattern of the model's image size already normalised (no file, no
// preprocessing), so image+text forwards can be tested before and apart from image decoding.
struct ImagePatternConfig {
  std::string prompt;
  int seed = 0;
};
// debug: fault injection for tests only.
struct DebugConfig {
  std::optional<PerturbConfig> perturb;
  std::optional<StallConfig> stall;
  std::vector<ImagePatternConfig> image_patterns;
  // debug.reverse_combine (tests only): under wide expert parallelism each expert rank's
  // combined results are applied to the wrong tokens (model::ExpertGroup): a negative control.
  bool reverse_combine = false;
};

// checklist: the limits of the Day-0 checklist every run ends with (diag/checklist.h).
struct ChecklistConfig {
  double first_token_text_s = 30;   // first-token latency of a text prompt may not exceed this (> 0)
  double first_token_image_s = 60;  // nor that of a prompt with images (> 0)
};

// serve: `dayzero serve` only (docs/serve.md "Config keys"); `dayzero run` reads none of it.
struct ServeConfig {
  std::string host = "127.0.0.1";  // the address rank 0 listens on
  int port = 8000;                 // 1..65535
  int64_t max_body_bytes = 1 << 20;  // a larger request body is refused (413)
  // Prompt tokens + max_tokens of one request, at most (400 above; the model's context also bounds it).
  int64_t max_request_tokens = 4096;
  double request_timeout_s = 60;   // a request not done by then ends with 504 and frees its batch slot (> 0)
  double drain_s = 30;             // after SIGTERM, in-flight requests may finish for this long (>= 0)
  int http_threads = 128;          // HTTP worker threads: connections served at once (>= 1)
  // A chat template file (Jinja subset) used instead of the model's own; resolved like model.path.
  std::optional<std::string> chat_template;
  // The folder local image_url paths must lie under (resolved like model.path); absent: only data: URIs.
  std::optional<std::string> image_dir;
  // Each served request's outputs (and activations per dump.activations) written into the rank
  // files as a prompt's, under the prompt id "req-N" (N as in its response id).
  bool dump_requests = false;
  // Requests waiting for a batch, at most; one more is answered 429.
  int64_t max_queue = 1024;
};

struct RunConfig {
  ModelConfig model;
  Backend backend = Backend::kAuto;
  CommKind comm = CommKind::kAuto;
  ParallelConfig parallel;
  TopologyConfig topology;
  LimitsConfig limits;
  std::vector<Prompt> prompts;  // at least one
  GenerateConfig generate;
  DumpConfig dump;
  WatchdogConfig watchdog;
  PreflightConfig preflight;
  RuntimeConfig runtime;
  ChecklistConfig checklist;
  ServeConfig serve;
  DebugConfig debug;

  std::string source_text;  // the YAML exactly as read: echoed into the run folder and dumps
  std::string source_name;  // file name used in messages
  std::string base_dir;     // relative paths resolve against it
  std::string config_stem;  // {config}: the file name without folder and extension
  // Key path ("generate.seed", "prompts[1].images[0]") -> (line, column), 1-based, for messages.
  std::map<std::string, std::pair<int, int>> key_positions;
};

// A key docs/design.md defines that this build cannot honour yet: the parser refuses it, with the
// reason, wherever it appears (a key is never parsed and then ignored).
struct UnbuiltKey {
  const char* path;    // key path, e.g. "debug"
  const char* reason;  // why it is refused, one clause
};
const std::vector<UnbuiltKey>& unbuilt_keys();

// Reads and parses a run config file; base_dir is the file's folder (made absolute).
// Errors: NotFound when the file cannot be read; InvalidArgument for everything in it, one
// sentence "<file>[:line:col]: <key path>: <what is wrong>". Exit code 2 either way.
Result<RunConfig> load_run_config(const std::string& path);

// Parses YAML text as if read from source_name, resolves relative paths against base_dir
// (left relative when base_dir is empty), then validate()s. Errors as load_run_config.
Result<RunConfig> parse_run_config(const std::string& yaml_text, const std::string& source_name,
                                   const std::string& base_dir);

// Value checks that need no YAML: ranges, prompt ids, text xor tokens, ep/etp against tp,
// dump placeholders, limits; and keys this build cannot honour (model.dtype other than float32
// off CUDA, comm: nccl without CUDA or with backend: cpu). InvalidArgument naming source_name
// and the key path.
Status validate(const RunConfig& cfg);

// The dump point vocabulary (STYLE.md): embed, attn_norm, attn_out, ffn_norm, router_logits,
// topk_ids, ffn_out, layer_out, final_norm, logits, vision_layer_out, projector_out, merged_embed.
const std::vector<std::string>& dump_point_names();
bool is_dump_point(std::string_view point);

// Expands {config} (config_stem), {time} (UTC "20261129-150405"), {jobid} (job_id_from_env());
// "{{" and "}}" are literal braces. InvalidArgument for an unknown placeholder or a lone brace.
// Called once, by rank 0; the result is broadcast.
Result<std::string> expand_dump_dir(const std::string& pattern, const std::string& config_stem,
                                    int64_t time_ns);

// The environment variables read for {jobid}, in order of preference: SLURM_JOB_ID, PBS_JOBID,
// LSB_JOBID, OMPI_MCA_ess_base_jobid (Open MPI 4), PMIX_NAMESPACE (Open MPI 5).
const std::vector<std::string>& job_id_env_vars();
// The first non-empty one, with characters outside [A-Za-z0-9._-] replaced by '_'; else "local".
std::string job_id_from_env();

}  // namespace dayzero::config
