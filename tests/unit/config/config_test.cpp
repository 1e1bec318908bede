// Run config parsing: the docs/design.md example, defaults, one error per rule (exit code 2, the file
// and the key path in the message), malformed YAML positions, dump.dir placeholders, relative
// paths and the dump point selection. No MPI, no checkpoint: pure text in, structs out.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/run_config.h"

namespace dayzero::config {
namespace {

// Verbatim from docs/design.md "Run config (YAML)".
constexpr const char* kDesignExample = R"(model:
  path: models/tiny-llava-moe
  dtype: float32                 # compute dtype (CPU: float32; GPU: bfloat16 default)
  weights_on_device: as_stored   # as_stored | bfloat16 | float32 (what the planner counts)
backend: auto            # auto | cpu | cuda
comm: auto               # auto | mpi | nccl
parallel: {pp: 2, tp: 2, ep: 2}   # optional; ep·etp = tp; omitted sizes are chosen by the planner
topology: {device_memory_gib: 80, memory_fraction: 0.9}  # optional overrides of discovery;
                         # on CPU device_memory_gib is the per-rank budget
limits: {max_prompt_tokens: 4096, max_image_pixels: 50000000}
prompts:
  - {id: capital, text: "The capital of France is", expect: {contains: "Paris"}}
  - {id: cat, text: "<image>\nWhat is in this picture?", images: [configs/data/cat.png]}
  - {id: raw, tokens: [151644, 872, 198]}   # token ids instead of text
generate: {max_new_tokens: 16, seed: 1234, stop_at_eos: true, top_k_record: 5}
dump:
  dir: runs/{config}-{time}   # placeholders: {config} file stem, {time} UTC stamp, {jobid}
  activations: {layers: all, points: [layer_out], phase: prefill, mode: full}  # or mode: stats
watchdog: {collective_timeout_s: 300, phase_timeout_s: 3600}
)";

constexpr const char* kMinimal = "model: {path: m}\nprompts: [{id: a, text: hi}]\n";

Result<RunConfig> parse(const std::string& yaml, const std::string& base_dir = "/cfg") {
  return parse_run_config(yaml, "run.yaml", base_dir);
}

TEST(RunConfig, DesignExampleParsesWithAllValues) {
  auto r = parse(kDesignExample, "/work/configs");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RunConfig& c = *r;
  EXPECT_EQ(c.model.path, "/work/configs/models/tiny-llava-moe");
  EXPECT_EQ(c.model.path_as_written, "models/tiny-llava-moe");
  EXPECT_EQ(c.model.dtype, DType::kF32);
  EXPECT_EQ(c.model.weights_on_device, WeightsOnDevice::kAsStored);
  EXPECT_EQ(c.backend, Backend::kAuto);
  EXPECT_EQ(c.comm, CommKind::kAuto);
  EXPECT_FALSE(c.parallel.dp.has_value());
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.ep, 2);
  EXPECT_FALSE(c.parallel.etp.has_value());
  EXPECT_EQ(c.topology.keys.device_memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(c.topology.keys.memory_fraction, 0.9);
  EXPECT_FALSE(c.topology.keys.nodes.has_value());
  EXPECT_EQ(c.limits.max_prompt_tokens, 4096);
  EXPECT_EQ(c.limits.max_image_pixels, 50000000);
  ASSERT_EQ(c.prompts.size(), 3u);
  EXPECT_EQ(c.prompts[0].id, "capital");
  EXPECT_EQ(c.prompts[0].text, "The capital of France is");
  EXPECT_EQ(c.prompts[0].expect.contains, std::vector<std::string>{"Paris"});
  EXPECT_EQ(c.prompts[1].text, "<image>\nWhat is in this picture?");
  EXPECT_EQ(c.prompts[1].images, std::vector<std::string>{"/work/configs/configs/data/cat.png"});
  EXPECT_EQ(c.prompts[1].images_as_written, std::vector<std::string>{"configs/data/cat.png"});
  EXPECT_TRUE(c.prompts[1].expect.empty());
  EXPECT_FALSE(c.prompts[2].text.has_value());
  EXPECT_EQ(c.prompts[2].tokens, (std::vector<int32_t>{151644, 872, 198}));
  EXPECT_EQ(c.generate.max_new_tokens, 16);
  EXPECT_EQ(c.generate.seed, 1234u);
  EXPECT_TRUE(c.generate.stop_at_eos);
  EXPECT_EQ(c.generate.top_k_record, 5);
  EXPECT_EQ(c.dump.dir, "runs/{config}-{time}");
  EXPECT_TRUE(c.dump.enabled);
  const DumpSelection& a = c.dump.activations;
  EXPECT_TRUE(a.enabled);
  EXPECT_TRUE(a.all_layers);
  EXPECT_FALSE(a.all_points);
  EXPECT_EQ(a.points, std::vector<std::string>{"layer_out"});
  EXPECT_EQ(a.phase, DumpPhase::kPrefill);
  EXPECT_EQ(a.mode, DumpMode::kFull);
  EXPECT_EQ(c.watchdog.collective_timeout_s, 300.0);
  EXPECT_EQ(c.watchdog.phase_timeout_s, 3600.0);
  EXPECT_FALSE(c.runtime.threads.has_value());
  EXPECT_EQ(c.source_text, kDesignExample);
  EXPECT_EQ(c.config_stem, "run");
  EXPECT_EQ(c.key_positions.at("generate.seed").first, 15);
}

// Keeps the design page and the parser in step: its first yaml block must parse, except the
// keys this build refuses (unbuilt_keys()), each of which must be refused by name.
TEST(RunConfig, DesignPageExampleStillParses) {
  std::ifstream in(std::string(DAYZERO_SOURCE_DIR) + "/docs/design.md");
  ASSERT_TRUE(in) << "docs/design.md not found in the source tree";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t section = doc.find("## Run config");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = doc.find("```yaml\n", section);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  const YAML::Node example = YAML::Load(doc.substr(begin + 8, end - begin - 8));
  // Removes key path (one or two levels) from n; false when n does not hold it.
  const auto remove = [](YAML::Node n, const std::string& path) {
    const size_t dot = path.find('.');
    YAML::Node parent = dot == std::string::npos ? n : n[path.substr(0, dot)];
    const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    if (!parent.IsMap() || !parent[leaf]) return false;
    parent.remove(leaf);
    return true;
  };
  // Each unbuilt key alone (the others removed) must be refused by name: which one the parser
  // meets first depends on where it sits.
  for (const UnbuiltKey& u : unbuilt_keys()) {
    YAML::Node only = YAML::Clone(example);
    for (const UnbuiltKey& other : unbuilt_keys())
      if (std::string(other.path) != u.path) remove(only, other.path);
    if (!remove(YAML::Clone(only), u.path)) continue;
    YAML::Emitter with;
    with << only;
    auto refused = parse(with.c_str());
    ASSERT_FALSE(refused.ok()) << u.path << " is accepted although it is listed as unbuilt";
    EXPECT_NE(refused.status().message().find(std::string(u.path) + ": cannot take effect: "), std::string::npos)
        << refused.status().message();
  }
  YAML::Node all = YAML::Clone(example);
  for (const UnbuiltKey& u : unbuilt_keys()) remove(all, u.path);
  YAML::Emitter rest;
  rest << all;
  auto r = parse(rest.c_str());
  EXPECT_TRUE(r.ok()) << r.status().message();
}

TEST(RunConfig, ImageLimitParsesAndIsBounded) {
  auto r = parse(std::string(kMinimal) + "limits: {max_image_pixels: 1234}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->limits.max_image_pixels, 1234);
  auto bad = parse(std::string(kMinimal) + "limits: {max_image_pixels: 0}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("limits.max_image_pixels"), std::string::npos) << bad.status().message();
  auto images = parse("model: {path: m}\nprompts: [{id: a, text: hi, images: [x.png, /abs/y.jpg]}]\n", "/cfg");
  ASSERT_TRUE(images.ok()) << images.status().message();
  EXPECT_EQ(images->prompts[0].images, (std::vector<std::string>{"/cfg/x.png", "/abs/y.jpg"}));
  EXPECT_EQ(images->prompts[0].images_as_written, (std::vector<std::string>{"x.png", "/abs/y.jpg"}));
}

// Keys that parse but that this build cannot honour are refused with the reason, never ignored.
TEST(RunConfig, KeysThatCannotTakeEffectAreRefused) {
  struct Refusal {
    const char* yaml;
    const char* message;
  };
  const Refusal cases[] = {
      {"model: {path: m, dtype: bfloat16}\nprompts: [{id: a, text: hi}]\n",
       "model.dtype: bfloat16 cannot take effect: the CPU backend computes in float32 only"},
      {"model: {path: m, dtype: float16}\nbackend: cpu\nprompts: [{id: a, text: hi}]\n",
       "model.dtype: float16 cannot take effect"},
      {"model: {path: m}\nbackend: cpu\ncomm: nccl\nprompts: [{id: a, text: hi}]\n", "comm: nccl cannot take effect"},
  };
  for (const Refusal& rc : cases) {
    auto r = parse(rc.yaml);
    ASSERT_FALSE(r.ok()) << rc.yaml;
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_NE(r.status().message().find(rc.message), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("run.yaml", 0), 0u) << r.status().message();
  }
#ifdef DAYZERO_WITH_CUDA
  const char* nccl_reason = "with backend: cpu";
  // With CUDA built in, comm: nccl is for the CUDA backend (auto decides at run time).
  EXPECT_TRUE(parse("model: {path: m}\ncomm: nccl\nprompts: [{id: a, text: hi}]\n").ok());
#else
  const char* nccl_reason = "built without CUDA";
#endif
  auto nccl = parse("model: {path: m}\nbackend: cpu\ncomm: nccl\nprompts: [{id: a, text: hi}]\n");
  EXPECT_NE(nccl.status().message().find(nccl_reason), std::string::npos) << nccl.status().message();
  // What the CPU backend does honour stays accepted; seed is recorded only.
  auto ok = parse("model: {path: m, dtype: float32}\ncomm: mpi\nprompts: [{id: a, text: hi}]\ngenerate: {seed: 7}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->generate.seed, 7u);
}

// debug.perturb parses (runtime/perturb_sink.h); its bad forms are refused by key.
TEST(RunConfig, ServeSectionParsesAndIsChecked) {
  auto r = parse(std::string(kMinimal) +
                 "serve: {host: 0.0.0.0, port: 9001, max_body_bytes: 4096, max_request_tokens: 200, "
                 "request_timeout_s: 2.5, drain_s: 0, http_threads: 8, chat_template: t/chat.jinja, dump_requests: true, "
                 "max_queue: 16}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->serve.host, "0.0.0.0");
  EXPECT_EQ(r->serve.port, 9001);
  EXPECT_EQ(r->serve.max_body_bytes, 4096);
  EXPECT_EQ(r->serve.max_request_tokens, 200);
  EXPECT_EQ(r->serve.request_timeout_s, 2.5);
  EXPECT_EQ(r->serve.drain_s, 0);
  EXPECT_EQ(r->serve.http_threads, 8);
  EXPECT_EQ(r->serve.chat_template, "/cfg/t/chat.jinja");
  EXPECT_TRUE(r->serve.dump_requests);
  EXPECT_EQ(r->serve.max_queue, 16);
  const auto defaults = parse(kMinimal);
  EXPECT_EQ(defaults->serve.max_queue, 1024);
  EXPECT_EQ(defaults->serve.port, 8000);
  EXPECT_EQ(defaults->serve.host, "127.0.0.1");
  EXPECT_FALSE(defaults->serve.chat_template.has_value());
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"serve: {port: 0}", "serve.port"},
           {"serve: {port: 70000}", "serve.port"},
           {"serve: {max_body_bytes: 0}", "serve.max_body_bytes"},
           {"serve: {request_timeout_s: 0}", "serve.request_timeout_s"},
           {"serve: {drain_s: -1}", "serve.drain_s"},
           {"serve: {http_threads: 0}", "serve.http_threads"},
           {"serve: {prot: 1}", "serve.prot"},
           {"serve: {dump_requests: 3}", "serve.dump_requests"},
           {"serve: {max_queue: 0}", "serve.max_queue"}}) {
    auto bad = parse(std::string(kMinimal) + yaml + "\n");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status().message();
  }
}

// A chat prompt: kept as JSON for the chat template (scalars as strings, null as null, key order kept).
TEST(RunConfig, MessagesPrompt) {
  auto r = parse("model: {path: m}\nprompts:\n  - {id: c, messages: [{role: system, content: Be brief.}, "
                 "{role: assistant, content: null, tool_calls: [{id: x, function: {name: f, arguments: '{}'}}]}]}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->prompts[0].messages_json.has_value());
  EXPECT_EQ(*r->prompts[0].messages_json,
            R"([{"role":"system","content":"Be brief."},{"role":"assistant","content":null,"tool_calls":)"
            R"([{"id":"x","function":{"name":"f","arguments":"{}"}}]}])");
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"[{id: c, text: hi, messages: [{role: user, content: hi}]}]", "more than one of text, tokens and messages"},
           {"[{id: c, messages: []}]", "prompts[0].messages"},
           {"[{id: c, messages: [{content: hi}]}]", "prompts[0].messages[0].role"},
           {"[{id: c, messages: [{role: user}]}]", "prompts[0].messages[0].content"},
           {"[{id: c, messages: [{role: user, content: hi, mood: calm}]}]", "prompts[0].messages[0].mood"}}) {
    auto bad = parse("model: {path: m}\nprompts: " + yaml + "\n");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(message), std::string::npos) << bad.status().message();
  }
}

TEST(RunConfig, DebugPerturbParses) {
  auto ok = parse(std::string(kMinimal) + "debug: {perturb: {point: layers.3.ffn_out, scale: 1.001}}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_TRUE(ok->debug.perturb.has_value());
  EXPECT_EQ(ok->debug.perturb->point, "layers.3.ffn_out");
  EXPECT_DOUBLE_EQ(ok->debug.perturb->scale, 1.001);
  EXPECT_FALSE(parse(kMinimal)->debug.perturb.has_value());
  const std::pair<const char*, const char*> refusals[] = {
      {"debug: {perturb: {point: layers.3.topk_ids, scale: 2}}\n", "debug.perturb.point: \"layers.3.topk_ids\" is not a point"},
      {"debug: {perturb: {point: layers.x.ffn_out, scale: 2}}\n", "debug.perturb.point"},
      {"debug: {perturb: {point: logits}}\n", "debug.perturb.scale: missing required key"},
      {"debug: {perturb: {point: logits, scale: 2, when: now}}\n", "debug.perturb.when: unknown key"},
  };
  for (const auto& [yaml, message] : refusals) {
    auto r = parse(std::string(kMinimal) + yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
}

// The checklist limits, a perturbation of one repetition and the planner's headroom parse;
// out-of-range values and unknown keys are refused by key.
TEST(RunConfig, ChecklistRepetitionAndHeadroom) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_DOUBLE_EQ(d->checklist.first_token_text_s, 30);
  EXPECT_DOUBLE_EQ(d->checklist.first_token_image_s, 60);
  EXPECT_FALSE(d->runtime.headroom_mib.has_value());
  auto ok = parse(std::string(kMinimal) +
                  "checklist: {first_token_text_s: 2.5, first_token_image_s: 90}\nruntime: {headroom_mib: 0}\n"
                  "debug: {perturb: {point: embed, scale: 2, repetition: 2}}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_DOUBLE_EQ(ok->checklist.first_token_text_s, 2.5);
  EXPECT_DOUBLE_EQ(ok->checklist.first_token_image_s, 90);
  EXPECT_EQ(ok->runtime.headroom_mib, 0);
  EXPECT_EQ(ok->debug.perturb->repetition, 2);
  const std::pair<const char*, const char*> refusals[] = {
      {"checklist: {first_token_s: 3}\n", "checklist.first_token_s: unknown key"},
      {"checklist: {first_token_image_s: -1}\n", "checklist.first_token_image_s: must be a number of seconds > 0"},
      {"runtime: {headroom_mib: -5}\n", "runtime.headroom_mib: must be >= 0 MiB"},
      {"debug: {perturb: {point: embed, scale: 2, repetition: 0}}\n", "debug.perturb.repetition: must be >= 1"},
  };
  for (const auto& [yaml, message] : refusals) {
    auto r = parse(std::string(kMinimal) + yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
}

// The flight recorder and the event log / timeline modes parse; values the code cannot honour
// are refused by key.
TEST(RunConfig, RingEventLogAndTimelineModes) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->watchdog.ring_events, 4096);
  EXPECT_EQ(d->dump.event_log, EventLogMode::kFull);
  EXPECT_EQ(d->dump.timeline, TimelineMode::kFull);
  auto ok = parse(std::string(kMinimal) + "watchdog: {ring_events: 16}\ndump: {event_log: off, timeline: phases}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->watchdog.ring_events, 16);
  EXPECT_EQ(ok->dump.event_log, EventLogMode::kOff);
  EXPECT_EQ(ok->dump.timeline, TimelineMode::kPhases);
  const std::pair<const char*, const char*> refusals[] = {
      {"watchdog: {ring_events: 0}\n", "watchdog.ring_events: must be in 1..1048576, got 0"},
      {"watchdog: {ring_events: 1048577}\n", "watchdog.ring_events: must be in 1..1048576"},
      {"watchdog: {ring_events: many}\n", "watchdog.ring_events: expected an integer"},
      {"dump: {event_log: some}\n", "dump.event_log: expected one of full | off"},
      {"dump: {timeline: collectives}\n", "dump.timeline: expected one of full | phases"},
  };
  for (const auto& [yaml, message] : refusals) {
    auto r = parse(std::string(kMinimal) + yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
}

TEST(RunConfig, DefaultsApply) {
  auto r = parse(kMinimal, "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RunConfig& c = *r;
  EXPECT_EQ(c.model.path, "m");  // no base dir: left relative
  EXPECT_FALSE(c.model.dtype.has_value());
  EXPECT_EQ(c.model.weights_on_device, WeightsOnDevice::kAsStored);
  EXPECT_EQ(c.backend, Backend::kAuto);
  EXPECT_EQ(c.comm, CommKind::kAuto);
  EXPECT_FALSE(c.parallel.tp.has_value());
  EXPECT_FALSE(c.topology.keys.memory_fraction.has_value());
  EXPECT_EQ(c.limits.max_prompt_tokens, 4096);
  EXPECT_EQ(c.limits.max_image_pixels, 50000000);
  EXPECT_EQ(c.generate.max_new_tokens, 16);
  EXPECT_FALSE(c.generate.seed.has_value());
  EXPECT_TRUE(c.generate.stop_at_eos);
  EXPECT_EQ(c.generate.top_k_record, 5);
  EXPECT_TRUE(c.dump.enabled);
  EXPECT_EQ(c.dump.dir, "runs/{config}-{time}");
  EXPECT_FALSE(c.dump.activations.enabled);
  EXPECT_FALSE(c.dump.activations.wants_point("layer_out"));
  EXPECT_EQ(c.watchdog.collective_timeout_s, 300.0);
  EXPECT_EQ(c.watchdog.phase_timeout_s, 3600.0);
  EXPECT_FALSE(c.runtime.threads.has_value());
}

TEST(RunConfig, OptionalForms) {
  auto r = parse(R"(
model: {path: /abs/m, dtype: bfloat16, weights_on_device: float32}
backend: cuda
comm: mpi
parallel: {dp: 2, pp: 1, tp: 8, ep: 4, etp: 2}
topology: {device_memory_gib: 141.5, memory_fraction: 1, nodes: 2, gpus_per_node: 8}
prompts:
  - id: q1
    text: "x"
    expect: {contains: [a, b], not_contains: zzz, first_tokens: [1, 2]}
    reference: " Paris."
generate: {seed: ~}
runtime: {threads: 4}
dump: {enabled: false, activations: {layers: "0-2, 7", points: all, phase: both, mode: stats}}
)");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RunConfig& c = *r;
  EXPECT_EQ(c.model.path, "/abs/m");
  EXPECT_EQ(c.model.dtype, DType::kBF16);
  EXPECT_EQ(c.model.weights_on_device, WeightsOnDevice::kF32);
  EXPECT_EQ(c.backend, Backend::kCuda);
  EXPECT_EQ(c.comm, CommKind::kMpi);
  EXPECT_EQ(c.parallel.etp, 2);
  EXPECT_EQ(c.topology.keys.gpus_per_node, 8);
  EXPECT_EQ(c.prompts[0].expect.contains, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.prompts[0].expect.not_contains, std::vector<std::string>{"zzz"});
  EXPECT_EQ(c.prompts[0].expect.first_tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.prompts[0].reference, " Paris.");
  EXPECT_FALSE(c.generate.seed.has_value());
  EXPECT_EQ(c.runtime.threads, 4);
  EXPECT_FALSE(c.dump.enabled);
  EXPECT_EQ(c.dump.activations.layers, (std::vector<int>{0, 1, 2, 7}));
  EXPECT_TRUE(c.dump.activations.all_points);
  EXPECT_EQ(c.dump.activations.mode, DumpMode::kStats);
  EXPECT_EQ(c.dump.activations.phase, DumpPhase::kBoth);
  EXPECT_FALSE(c.dump.activations.enabled);  // dump.enabled: false switches the selection off
  EXPECT_FALSE(c.dump.activations.wants_prefill());

  auto both = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {phase: both}}\n");
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_TRUE(both->dump.activations.wants_prefill());
  EXPECT_TRUE(both->dump.activations.wants_decode());
}

struct ErrorCase {
  const char* yaml;
  const char* key_path;  // must appear in the message
};

// Each case breaks one rule of an otherwise valid config.
TEST(RunConfig, EachErrorNamesFileAndKey) {
  const ErrorCase cases[] = {
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {max_new_tokns: 3}\n", "generate.max_new_tokns"},
      {"model: {path: m}\npromts: [{id: a, text: hi}]\n", "promts"},
      {"model: {dtype: float32}\nprompts: [{id: a, text: hi}]\n", "model.path"},
      {"prompts: [{id: a, text: hi}]\n", "model"},
      {"model: {path: m}\n", "prompts"},
      {"model: {path: m}\nprompts: []\n", "prompts"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}, {id: a, text: yo}]\n", "prompts[1].id"},
      {"model: {path: m}\nprompts: [{id: a, text: hi, tokens: [1]}]\n", "prompts[0]"},
      {"model: {path: m}\nprompts: [{id: a}]\n", "prompts[0]"},
      {"model: {path: m}\nprompts: [{text: hi}]\n", "prompts[0].id"},
      {"model: {path: m}\nprompts: [{id: a/b, text: hi}]\n", "prompts[0].id"},
      {"model: {path: m}\nprompts: [{id: a, tokens: [1, -2]}]\n", "prompts[0].tokens[1]"},
      {"model: {path: m}\nprompts: [{id: a, text: hi, expect: {contain: x}}]\n", "prompts[0].expect.contain"},
      {"model: {path: m}\nprompts: [{id: a, text: hi, expect: {first_tokens: [1, 2, 3]}}]\n"
       "generate: {max_new_tokens: 2}\n",
       "prompts[0].expect.first_tokens"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {max_new_tokens: -1}\n", "generate.max_new_tokens"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {max_new_tokens: ten}\n", "generate.max_new_tokens"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {max_new_tokens: \"16\"}\n", "generate.max_new_tokens"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {max_new_tokens: [1]}\n", "generate.max_new_tokens"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {stop_at_eos: maybe}\n", "generate.stop_at_eos"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate: {seed: -5}\n", "generate.seed"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ntopology: {memory_fraction: 1.5}\n", "topology.memory_fraction"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ntopology: {memory_fraction: 0}\n", "topology.memory_fraction"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ntopology: {device_memory_gib: -80}\n", "topology.device_memory_gib"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nparallel: {tp: 4, ep: 3}\n", "parallel.ep"},
      // Wide expert parallelism: ep above tp must be a multiple of it.
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nparallel: {tp: 2, ep: 5}\n", "parallel.ep"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nparallel: {tp: 4, ep: 2, etp: 1}\n", "parallel.etp"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nparallel: {tp: 0}\n", "parallel.tp"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nbackend: tpu\n", "backend"},
      {"model: {path: m, dtype: float8}\nprompts: [{id: a, text: hi}]\n", "model.dtype"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {phase: middle}}\n",
       "dump.activations.phase"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {points: [layer_out, attn_outt]}}\n",
       "dump.activations.points[1]"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {layers: \"3-1\"}}\n",
       "dump.activations.layers"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {layers: [0, -1]}}\n",
       "dump.activations.layers[1]"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {dir: \"runs/{host}\"}\n", "dump.dir"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nwatchdog: {phase_timeout_s: -1}\n", "watchdog.phase_timeout_s"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nruntime: {threads: 0}\n", "runtime.threads"},
      {"model: {path: m}\nprompts: [{id: a, text: hi}]\nlimits: {max_prompt_tokens: 0}\n", "limits.max_prompt_tokens"},
      {"model: {path: m}\nprompts: [{id: a, tokens: [1, 2, 3]}]\nlimits: {max_prompt_tokens: 2}\n",
       "prompts[0].tokens"},
      {"model: {path: m}\nmodel: {path: n}\nprompts: [{id: a, text: hi}]\n", "model"},
      {"model: m\nprompts: [{id: a, text: hi}]\n", "model"},
  };
  for (const ErrorCase& ec : cases) {
    auto r = parse(ec.yaml);
    ASSERT_FALSE(r.ok()) << ec.yaml;
    const std::string& msg = r.status().message();
    EXPECT_EQ(r.status().exit_code(), 2) << msg;
    EXPECT_NE(msg.find("run.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(" ") + ec.key_path + ":"), std::string::npos)
        << "expected key path " << ec.key_path << " in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(RunConfig, UnknownKeyGivesPositionAndSuggestion) {
  auto r = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ngenerate:\n  max_new_tokns: 3\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "run.yaml:4:3: generate.max_new_tokns: unknown key; did you mean generate.max_new_tokens?");
}

TEST(RunConfig, MalformedYamlReportsLine) {
  auto r = parse("model:\n  path: m\nprompts:\n  - {id: a, text: \"hi}\n  - [\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().exit_code(), 2);
  EXPECT_EQ(r.status().message().rfind("run.yaml:", 0), 0u) << r.status().message();

  auto bad_indent = parse("model:\n  path: m\n prompts: x\n");
  ASSERT_FALSE(bad_indent.ok());
  EXPECT_EQ(bad_indent.status().message().rfind("run.yaml:3:", 0), 0u) << bad_indent.status().message();
}

TEST(RunConfig, RelativePathsResolveAgainstConfigFolder) {
  auto r = parse(
      "model: {path: ../models/m}\n"
      "prompts: [{id: a, text: hi, images: [img/a.png, /abs/b.png]}, {id: b, text: x, images: c.png}]\n",
      "/data/configs");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.path, "/data/models/m");
  EXPECT_EQ(r->model.path_as_written, "../models/m");
  EXPECT_EQ(r->prompts[0].images, (std::vector<std::string>{"/data/configs/img/a.png", "/abs/b.png"}));
  EXPECT_EQ(r->prompts[1].images, std::vector<std::string>{"/data/configs/c.png"});
}

TEST(RunConfig, LoadFromFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("dz_config_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "nightly.yaml").string();
  {
    std::ofstream out(file);
    out << kMinimal;
  }
  auto r = load_run_config(file);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->source_text, kMinimal);
  EXPECT_EQ(r->config_stem, "nightly");
  EXPECT_EQ(r->base_dir, dir.string());
  EXPECT_EQ(r->model.path, (dir / "m").string());

  auto missing = load_run_config((dir / "absent.yaml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().exit_code(), 2);
  EXPECT_NE(missing.status().message().find("absent.yaml"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(DumpDir, Placeholders) {
  tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 10;
  t.tm_mday = 29;
  t.tm_hour = 15;
  t.tm_min = 4;
  t.tm_sec = 5;
  const int64_t ns = static_cast<int64_t>(timegm(&t)) * 1000000000LL + 123;

  for (const std::string& var : job_id_env_vars()) unsetenv(var.c_str());
  auto local = expand_dump_dir("runs/{config}-{time}-{jobid}", "nightly", ns);
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(*local, "runs/nightly-20261129-150405-local");

  setenv("OMPI_MCA_ess_base_jobid", "99", 1);
  EXPECT_EQ(*expand_dump_dir("{jobid}", "c", ns), "99");
  setenv("SLURM_JOB_ID", "4242", 1);
  EXPECT_EQ(*expand_dump_dir("out/{jobid}/{config}", "c", ns), "out/4242/c");
  setenv("SLURM_JOB_ID", "a/b c", 1);
  EXPECT_EQ(*expand_dump_dir("{jobid}", "c", ns), "a_b_c");
  unsetenv("SLURM_JOB_ID");
  unsetenv("OMPI_MCA_ess_base_jobid");

  EXPECT_EQ(*expand_dump_dir("a{{b}}", "c", ns), "a{b}");
  for (const char* bad : {"runs/{host}", "runs/{config", "runs/x}"}) {
    auto r = expand_dump_dir(bad, "c", ns);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().exit_code(), 2);
  }
  EXPECT_NE(expand_dump_dir("runs/{host}", "c", ns).status().message().find("{host}"), std::string::npos);
}

TEST(DumpSelection, LayersAndPoints) {
  auto r = parse(
      "model: {path: m}\nprompts: [{id: a, text: hi}]\n"
      "dump: {activations: {layers: [\"0-3,7\", 9, 3], points: [layer_out, attn_out, logits, vision_layer_out]}}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const DumpSelection& s = r->dump.activations;
  EXPECT_EQ(s.layers, (std::vector<int>{0, 1, 2, 3, 7, 9}));
  EXPECT_TRUE(s.wants_layer(7));
  EXPECT_FALSE(s.wants_layer(5));
  EXPECT_TRUE(s.wants_point("attn_out"));
  EXPECT_FALSE(s.wants_point("ffn_out"));
  EXPECT_FALSE(s.wants_point("not_a_point"));
  EXPECT_TRUE(s.wants_prefill());
  EXPECT_FALSE(s.wants_decode());
  EXPECT_TRUE(s.wants_key("layers.7.attn_out"));
  EXPECT_FALSE(s.wants_key("layers.8.attn_out"));
  EXPECT_FALSE(s.wants_key("layers.7.ffn_out"));
  EXPECT_TRUE(s.wants_key("logits"));
  EXPECT_FALSE(s.wants_key("embed"));
  EXPECT_TRUE(s.wants_key("vision.layers.2.layer_out"));
  EXPECT_FALSE(s.wants_key("vision.layers.4.layer_out"));
  EXPECT_FALSE(s.wants_key("layers.x.layer_out"));

  DumpSelection off = s;
  off.enabled = false;
  EXPECT_FALSE(off.wants_layer(7));
  EXPECT_FALSE(off.wants_key("layers.7.attn_out"));

  auto all = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndump: {activations: {}}\n");
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_TRUE(all->dump.activations.wants_key("layers.120.router_logits"));
  EXPECT_TRUE(all->dump.activations.wants_key("merged_embed"));
  EXPECT_FALSE(all->dump.activations.wants_key("layers.1"));
}

// debug.stall parses into group kind, op and seq, next to debug.perturb.
TEST(DebugConfig, StallParses) {
  auto r = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndebug: {stall: {rank: 2, before: \"tp all_reduce #40\"}}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->debug.stall.has_value());
  EXPECT_EQ(r->debug.stall->rank, 2);
  EXPECT_EQ(r->debug.stall->group, "tp");
  EXPECT_EQ(r->debug.stall->op, "all_reduce");
  EXPECT_EQ(r->debug.stall->seq, 40);
  auto none = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\n");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->debug.stall.has_value());

  auto both = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\n"
                    "debug: {perturb: {point: embed, scale: 2}, stall: {rank: 1, before: \"pp recv #4\"}}\n");
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_TRUE(both->debug.perturb.has_value());
  ASSERT_TRUE(both->debug.stall.has_value());
  EXPECT_EQ(both->debug.stall->group, "pp");

  const char* bad[] = {"tp all_reduce", "tp all_reduce 40", "tq all_reduce #40", "tp all_reduce #4x",
                       "tp all_reduce #40 now", "#40"};
  for (const char* b : bad) {
    auto e = parse(std::string("model: {path: m}\nprompts: [{id: a, text: hi}]\ndebug: {stall: {rank: 1, before: \"") + b +
                   "\"}}\n");
    ASSERT_FALSE(e.ok()) << b;
    EXPECT_NE(e.status().message().find("debug.stall.before"), std::string::npos) << e.status().message();
  }
  auto neg = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndebug: {stall: {rank: -1, before: \"pp send #0\"}}\n");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("debug.stall.rank"), std::string::npos) << neg.status().message();
  // seconds: a pause instead of a stall for good; absent: for good; not positive: refused.
  EXPECT_FALSE(r->debug.stall->seconds.has_value());
  auto pause = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndebug: {stall: {rank: 1, before: \"pp send #0\", seconds: 2.5}}\n");
  ASSERT_TRUE(pause.ok()) << pause.status().message();
  EXPECT_EQ(pause->debug.stall->seconds, 2.5);
  auto zero = parse("model: {path: m}\nprompts: [{id: a, text: hi}]\ndebug: {stall: {rank: 1, before: \"pp send #0\", seconds: 0}}\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("debug.stall.seconds"), std::string::npos) << zero.status().message();
}

}  // namespace
}  // namespace dayzero::config
