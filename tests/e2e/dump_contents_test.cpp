// What one `dayzero run` leaves behind, against docs/design.md's run folder and HDF5 schema
// (version 1): root attributes, activation keys and shapes in prefill and decode, the outputs
// and how they agree with the logits, /weights against the checkpoint's own bytes, /timeline,
// plan.json, config.yaml, the event log and heartbeat; then dump selection (layers, points,
// stats mode), the reference NLL, and `expect` turning into exit code 1 or 0.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/xxhash.h"
#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kMaxNewTokens = 6;
constexpr int kTopK = 4;
constexpr int64_t kVocab = 512;  // tests/data/golden/llama.yaml
constexpr int64_t kEmbd = 64;
constexpr int kLayers = 2;

// The run every test but the selection and expect ones reads.
struct MainRun {
  fs::path dir, model, run_dir, config;
  std::string yaml;
  Outcome outcome;
};

const MainRun& main_run() {
  static const MainRun r = [] {
    MainRun m;
    m.dir = scratch_dir("dump-contents");
    m.model = m.dir / "model";
    m.run_dir = m.dir / "run";
    m.config = m.dir / "main.yaml";
    make_model_from_yaml(golden_sizes("llama"), m.model);
    m.yaml = "model: {path: model, dtype: float32}\n"
             "prompts:\n"
             "  - {id: capital, text: \"The capital of France is\", reference: \" Paris, of course.\"}\n"
             "  - {id: raw, tokens: [5, 6, 7, 8]}\n"
             "generate: {max_new_tokens: " + std::to_string(kMaxNewTokens) +
             ", stop_at_eos: false, top_k_record: " + std::to_string(kTopK) + "}\n"
             "dump:\n"
             "  dir: " + m.run_dir.string() + "\n"
             "  activations: {layers: all, phase: both}\n";
    write_file(m.config, m.yaml);
    m.outcome = run_dayzero("run " + m.config.string());
    return m;
  }();
  return r;
}

// The main run's rank file, opened (an error when the run or the open failed).
Result<dump::DumpReader> open_main() {
  const MainRun& m = main_run();
  if (m.outcome.exit_code != 0) return Status::Internal("the main run failed:\n" + m.outcome.output);
  return dump::DumpReader::open(rank0_dump(m.run_dir).string());
}

#define OPEN_MAIN(r)                                          \
  auto r##_result = open_main();                              \
  ASSERT_TRUE(r##_result.ok()) << r##_result.status().message(); \
  const dump::DumpReader& r = *r##_result

// The first line of output that contains needle ("" when none).
std::string line_with(const std::string& output, const std::string& needle) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

std::vector<std::string> layer_keys(const std::vector<std::string>& points) {
  std::vector<std::string> keys;
  for (int l = 0; l < kLayers; ++l)
    for (const auto& p : points) keys.push_back("layers." + std::to_string(l) + "." + p);
  return keys;
}

// The 13 keys a dense 2-layer model dumps per phase, in the reader's byte order.
std::vector<std::string> all_dense_keys() {
  std::vector<std::string> keys = layer_keys({"attn_norm", "attn_out", "ffn_norm", "ffn_out", "layer_out"});
  keys.insert(keys.end(), {"embed", "final_norm", "logits"});
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST(DumpContents, RootAttributes) {
  const MainRun& m = main_run();
  ASSERT_EQ(m.outcome.exit_code, 0) << m.outcome.output;
  OPEN_MAIN(r);
  EXPECT_EQ(r.schema_version().value(), 1);
  EXPECT_TRUE(r.complete().value());
  auto a = r.root_attributes();
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(a->world_size, 1);
  EXPECT_EQ(a->dp, 1);
  EXPECT_EQ(a->pp, 1);
  EXPECT_EQ(a->tp, 1);
  EXPECT_EQ(a->ep, 1);
  EXPECT_EQ(a->etp, 1);
  EXPECT_EQ(a->backend, "cpu");
  EXPECT_FALSE(a->dayzero_version.empty());
  EXPECT_FALSE(a->hostname.empty());
  EXPECT_FALSE(a->device.empty());
  EXPECT_TRUE(std::regex_match(a->started_at, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << a->started_at;
  EXPECT_EQ(a->clock_offset_ns, 0) << "rank 0's clock is the reference";
  EXPECT_EQ(a->run_config, m.yaml);

  const json model_config = json::parse(a->model_config, nullptr, false);
  ASSERT_FALSE(model_config.is_discarded()) << a->model_config;
  EXPECT_EQ(model_config.value("model_type", ""), "llama");
  EXPECT_EQ(model_config, json::parse(read_file(m.model / "config.json")));
  const json plan = json::parse(a->plan, nullptr, false);
  ASSERT_FALSE(plan.is_discarded()) << a->plan;
  EXPECT_EQ(plan.value("world_size", -1), 1);
}

TEST(DumpContents, RunFolderFiles) {
  const MainRun& m = main_run();
  ASSERT_EQ(m.outcome.exit_code, 0) << m.outcome.output;
  EXPECT_EQ(read_file(m.run_dir / "config.yaml"), m.yaml);

  const json plan = json::parse(read_file(m.run_dir / "plan.json"), nullptr, false);
  ASSERT_FALSE(plan.is_discarded());
  EXPECT_EQ(plan.value("world_size", -1), 1);
  EXPECT_EQ(plan.value("dp", -1), 1);

  const json live = json::parse(read_file(m.run_dir / "live" / "rank-00000.json"), nullptr, false);
  ASSERT_FALSE(live.is_discarded()) << "live/rank-00000.json is missing or not JSON";
  EXPECT_EQ(live.value("rank", -1), 0);

  // Every begin has its end after a clean run, and no end comes without a begin.
  const std::string events = read_file(m.run_dir / "events" / "rank-00000.jsonl");
  ASSERT_FALSE(events.empty()) << "events/rank-00000.jsonl is missing or empty";
  std::map<std::string, std::vector<int64_t>> open;  // kind|name|group|seq -> begin times
  std::istringstream in(events);
  int lines = 0, begins = 0, metas = 0;
  std::set<std::string> seen;
  for (std::string line; std::getline(in, line); ++lines) {
    const json e = json::parse(line, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << "line " << lines + 1 << ": " << line;
    const std::string key = e.value("kind", "") + "|" + e.value("name", "") + "|" + e.value("group", "") + "|" +
                            std::to_string(e.value("seq", int64_t{-2}));
    const auto t = e.value("t_ns", int64_t{0});
    ASSERT_GT(t, 0) << line;
    if (e.value("ev", "") == "meta") {  // the rank's place and clock offset, once
      ++metas;
      EXPECT_EQ(e.value("rank", -1), 0) << line;
      EXPECT_EQ(e.value("clock_offset_ns", int64_t{-1}), 0) << line;
      continue;
    }
    seen.insert(e.value("kind", "") + "|" + e.value("name", ""));
    if (e.value("ev", "") == "begin") {
      open[key].push_back(t);
      ++begins;
    } else {
      ASSERT_EQ(e.value("ev", ""), "end") << line;
      ASSERT_FALSE(open[key].empty()) << "end without begin: " << line;
      EXPECT_GE(t, open[key].back()) << line;
      open[key].pop_back();
    }
  }
  for (const auto& [key, times] : open) EXPECT_TRUE(times.empty()) << "begin without end: " << key;
  EXPECT_EQ(metas, 1);
  EXPECT_EQ(lines, 2 * begins + metas);
  EXPECT_TRUE(seen.count("phase|load"));
  EXPECT_TRUE(seen.count("prefill|capital") && seen.count("decode|capital"));
  EXPECT_TRUE(seen.count("prefill|raw") && seen.count("decode|raw"));
}

TEST(DumpContents, ActivationKeysAndShapes) {
  OPEN_MAIN(r);
  EXPECT_EQ(r.list_prompts().value(), (std::vector<std::string>{"capital", "raw"}));
  for (const std::string p : {"capital", "raw"}) {
    const auto out = r.read_output(p);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const auto n_tokens = static_cast<int64_t>(out->prompt_ids.size());
    for (const std::string phase : {"prefill", "decode"}) {
      const auto names = r.list_activations(p, phase);
      ASSERT_TRUE(names.ok()) << names.status().message();
      EXPECT_EQ(*names, all_dense_keys()) << p << " " << phase;
      // Prefill: one row per prompt token, but logits only at the last position. Decode: one
      // row per decode forward pass; the last generated token needs none.
      const int64_t rows = phase == "prefill" ? n_tokens : kMaxNewTokens - 1;
      for (const std::string& name : *names) {
        const auto a = r.read_activation(p, phase, name);
        ASSERT_TRUE(a.ok()) << a.status().message();
        EXPECT_FALSE(r.is_stats(p, phase, name)) << p << "/" << phase << "/" << name;
        const bool logits = name == "logits";
        const std::vector<int64_t> want = {logits && phase == "prefill" ? 1 : rows, logits ? kVocab : kEmbd};
        EXPECT_EQ(a->shape, want) << p << "/" << phase << "/" << name;
        EXPECT_TRUE(std::all_of(a->data.begin(), a->data.end(), [](float v) { return std::isfinite(v); }))
            << p << "/" << phase << "/" << name;
      }
    }
  }
}

TEST(DumpContents, OutputsAgreeWithLogits) {
  OPEN_MAIN(r);
  const auto raw = r.read_output("raw");
  ASSERT_TRUE(raw.ok()) << raw.status().message();
  EXPECT_EQ(raw->prompt_ids, (std::vector<int32_t>{5, 6, 7, 8}));
  const auto capital = r.read_output("capital");
  ASSERT_TRUE(capital.ok()) << capital.status().message();
  // Text is tokenized with tokenizer.json's post_processor as is (a ByteLevel one adds no BOS).
  ASSERT_GE(capital->prompt_ids.size(), 5u);
  EXPECT_TRUE(std::all_of(capital->prompt_ids.begin(), capital->prompt_ids.end(),
                          [](int32_t id) { return id >= 0 && id < kVocab; }));

  for (const std::string p : {"capital", "raw"}) {
    const auto out = r.read_output(p);
    ASSERT_TRUE(out.ok());
    ASSERT_EQ(out->generated_ids.size(), static_cast<size_t>(kMaxNewTokens)) << p;
    ASSERT_EQ(out->logits_last.size(), static_cast<size_t>(kVocab)) << p;
    ASSERT_EQ(out->topk, kTopK) << p;
    ASSERT_EQ(out->step_topk_ids.size(), static_cast<size_t>(kMaxNewTokens * kTopK)) << p;
    auto ids_shape = r.read_int32("/outputs/" + p + "/step_topk_ids");
    ASSERT_TRUE(ids_shape.ok());
    EXPECT_EQ(ids_shape->shape, (std::vector<int64_t>{kMaxNewTokens, kTopK}));
    auto logits_shape = r.read_float("/outputs/" + p + "/logits_last");
    ASSERT_TRUE(logits_shape.ok());
    EXPECT_EQ(logits_shape->shape, (std::vector<int64_t>{kVocab}));
    EXPECT_TRUE(r.has_attr("text", "/outputs/" + p));
    EXPECT_FALSE(out->text.empty()) << p;

    // logits_last is the prefill logits row; step s's scores are the logits that chose
    // generated token s: logits_last for s = 0, decode logits row s - 1 after that.
    const auto prefill_logits = r.read_activation(p, "prefill", "logits");
    const auto decode_logits = r.read_activation(p, "decode", "logits");
    ASSERT_TRUE(prefill_logits.ok() && decode_logits.ok());
    EXPECT_EQ(prefill_logits->data, out->logits_last) << p;
    for (int s = 0; s < kMaxNewTokens; ++s) {
      const float* row = s == 0 ? out->logits_last.data() : decode_logits->data.data() + (s - 1) * kVocab;
      std::vector<int32_t> order(kVocab);
      for (int i = 0; i < kVocab; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      EXPECT_EQ(out->generated_ids[s], order[0]) << p << " step " << s << ": greedy is the argmax";
      for (int j = 0; j < kTopK; ++j) {
        EXPECT_EQ(out->step_topk_ids[s * kTopK + j], order[j]) << p << " step " << s << " rank " << j;
        EXPECT_EQ(out->step_topk_logits[s * kTopK + j], row[order[j]]) << p << " step " << s << " rank " << j;
      }
    }
  }
}

TEST(DumpContents, WeightsMatchTheCheckpointBytes) {
  OPEN_MAIN(r);
  const auto rows = r.read_weights();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  auto file = checkpoint::SafetensorsFile::open((main_run().model / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(rows->size(), file->tensors().size()) << "one row per tensor";
  std::set<std::string> names;
  checkpoint::ByteReader reader;
  for (const dump::WeightRow& w : *rows) {
    EXPECT_TRUE(names.insert(w.name).second) << w.name << " has two rows";
    const checkpoint::TensorInfo* t = file->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(w.file, "model.safetensors") << w.name;
    EXPECT_EQ(w.dtype, "BF16") << w.name;
    EXPECT_EQ(w.shape, t->shape) << w.name;
    EXPECT_EQ(w.offset, t->offset) << w.name;
    EXPECT_EQ(w.bytes_read, t->nbytes) << w.name;
    EXPECT_EQ(w.ranges, 1u) << w.name;
    EXPECT_EQ(w.nan_count, 0) << w.name;
    EXPECT_EQ(w.inf_count, 0) << w.name;
    std::vector<uint8_t> bytes(t->nbytes);
    ASSERT_TRUE(reader.read(t->file, t->offset, t->nbytes, bytes.data()).ok());
    checkpoint::Xxh64 h;
    h.update(bytes.data(), bytes.size());
    EXPECT_NE(w.checksum, 0u) << w.name;
    EXPECT_EQ(w.checksum, h.digest()) << w.name << ": xxh64 (seed 0) of the on-disk bytes";
  }
}

TEST(DumpContents, TimelineHasLoadAndEachPrompt) {
  OPEN_MAIN(r);
  const auto events = r.read_timeline();
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_FALSE(events->empty());
  std::set<std::string> seen;
  for (const dump::TimelineEvent& e : *events) {
    EXPECT_GT(e.t_begin_ns, 0) << e.kind << " " << e.name;
    EXPECT_GE(e.t_end_ns, e.t_begin_ns) << e.kind << " " << e.name << " is open after a clean run";
    seen.insert(e.kind + "|" + e.name);
  }
  EXPECT_TRUE(seen.count("phase|load"));
  EXPECT_TRUE(seen.count("prefill|capital") && seen.count("decode|capital"));
  EXPECT_TRUE(seen.count("prefill|raw") && seen.count("decode|raw"));
}

TEST(DumpContents, ReferenceNllOnlyWhereAReferenceIsGiven) {
  OPEN_MAIN(r);
  const auto nll = r.attr_double("reference_nll", "/outputs/capital");
  ASSERT_TRUE(nll.ok()) << nll.status().message();
  EXPECT_GT(*nll, 0.0);
  EXPECT_TRUE(std::isfinite(*nll));
  const auto tokens = r.attr_int("reference_tokens", "/outputs/capital");
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  EXPECT_GT(*tokens, 0);
  EXPECT_FALSE(r.has_attr("reference_nll", "/outputs/raw"));
  EXPECT_NE(line_with(main_run().outcome.output, "reference NLL"), "") << main_run().outcome.output;
}

// A second run with the same model and prompts but another dump section.
struct SelectionRun {
  Outcome outcome;
  fs::path run_dir;
};

SelectionRun run_with_activations(const std::string& name, const std::string& activations) {
  const MainRun& m = main_run();
  SelectionRun s;
  s.run_dir = m.dir / ("run-" + name);
  std::string yaml = m.yaml;
  const std::string from = "  dir: " + m.run_dir.string() + "\n  activations: {layers: all, phase: both}\n";
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos);
  yaml.replace(at, from.size(), "  dir: " + s.run_dir.string() + "\n  activations: " + activations + "\n");
  write_file(m.dir / (name + ".yaml"), yaml);
  s.outcome = run_dayzero("run " + (m.dir / (name + ".yaml")).string());
  return s;
}

TEST(DumpContents, LayerAndPointSelection) {
  const SelectionRun s = run_with_activations("select", "{layers: [1], points: [layer_out], phase: prefill}");
  ASSERT_EQ(s.outcome.exit_code, 0) << s.outcome.output;
  auto r = dump::DumpReader::open(rank0_dump(s.run_dir).string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  OPEN_MAIN(full);
  for (const std::string p : {"capital", "raw"}) {
    EXPECT_EQ(r->list_activations(p, "prefill").value(), (std::vector<std::string>{"layers.1.layer_out"})) << p;
    EXPECT_FALSE(r->list_activations(p, "decode").ok()) << p << ": phase: prefill dumps no decode rows";
    const auto got = r->read_activation(p, "prefill", "layers.1.layer_out");
    const auto want = full.read_activation(p, "prefill", "layers.1.layer_out");
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(got->shape, want->shape) << p;
    EXPECT_EQ(got->data, want->data) << p << ": the selected key holds the same values as in the full dump";
  }
}

// (min, max, mean, std, abs_max, l2, nan, inf) of one row range, accumulated in double.
std::array<double, 8> reference_stats(const float* x, int64_t n) {
  double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0, amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min<double>(mn, x[i]);
    mx = std::max<double>(mx, x[i]);
    sum += x[i];
    sq += double(x[i]) * x[i];
    amax = std::max<double>(amax, std::fabs(x[i]));
  }
  const double mean = sum / n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  return {mn, mx, mean, std::sqrt(var / n), amax, std::sqrt(sq), 0, 0};
}

void expect_stats(const double* got, const float* values, int64_t n, const std::string& what) {
  const std::array<double, 8> want = reference_stats(values, n);
  const char* fields[] = {"min", "max", "mean", "std", "abs_max", "l2", "nan", "inf"};
  for (int i = 0; i < 8; ++i) {
    // min, max, abs_max, nan, inf are exact; mean, std and l2 are double sums whose order or
    // formula (two-pass vs one-pass) may differ from this one: 1e-9 relative covers that.
    const double tol = (i == 2 || i == 3 || i == 5) ? 1e-9 * std::max(1.0, std::fabs(want[i])) : 0.0;
    EXPECT_NEAR(got[i], want[i], tol) << what << " " << fields[i];
  }
}

TEST(DumpContents, StatsModeWritesEightValueVectors) {
  const SelectionRun s =
      run_with_activations("stats", "{layers: all, points: [embed, layer_out, logits], phase: both, mode: stats}");
  ASSERT_EQ(s.outcome.exit_code, 0) << s.outcome.output;
  auto r = dump::DumpReader::open(rank0_dump(s.run_dir).string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  OPEN_MAIN(full);
  const std::vector<std::string> keys = {"embed", "layers.0.layer_out", "layers.1.layer_out", "logits"};
  for (const std::string p : {"capital", "raw"}) {
    for (const std::string phase : {"prefill", "decode"}) {
      EXPECT_EQ(r->list_activations(p, phase).value(), keys) << p << " " << phase;
      for (const std::string& key : keys) {
        const std::string what = p + "/" + phase + "/" + key;
        EXPECT_TRUE(r->is_stats(p, phase, key)) << what;
        const auto stats = r->read_double(dump::activation_path(p, phase, key));
        const auto values = full.read_activation(p, phase, key);
        ASSERT_TRUE(stats.ok() && values.ok()) << what;
        const int64_t width = values->shape[1];
        if (phase == "prefill") {
          // One vector over the whole [n_tokens, width] tensor.
          ASSERT_EQ(stats->shape, (std::vector<int64_t>{8})) << what;
          expect_stats(stats->data.data(), values->data.data(), static_cast<int64_t>(values->data.size()), what);
        } else {
          // One row per decode step, over that step's [1, width].
          ASSERT_EQ(stats->shape, (std::vector<int64_t>{kMaxNewTokens - 1, 8})) << what;
          for (int s = 0; s < kMaxNewTokens - 1; ++s)
            expect_stats(stats->data.data() + 8 * s, values->data.data() + s * width, width,
                         what + " step " + std::to_string(s));
        }
      }
    }
  }
}

// A run of the main prompts with an `expect` on the first one and no activations.
Outcome run_with_expect(const std::string& name, const std::string& expect) {
  const MainRun& m = main_run();
  std::string yaml = m.yaml;
  const std::string from = "reference: \" Paris, of course.\"}";
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos);
  yaml.replace(at, from.size(), "expect: " + expect + "}");
  const std::string dir_line = "  dir: " + m.run_dir.string() + "\n  activations: {layers: all, phase: both}\n";
  yaml.replace(yaml.find(dir_line), dir_line.size(), "  dir: " + (m.dir / ("run-" + name)).string() + "\n");
  write_file(m.dir / (name + ".yaml"), yaml);
  return run_dayzero("run " + (m.dir / (name + ".yaml")).string());
}

TEST(DumpContents, FailedExpectContainsExitsOneNamingThePrompt) {
  const Outcome o = run_with_expect("expect-contains", "{contains: \"zzzz-not-there\"}");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  const std::string error = line_with(o.output, "error:");
  EXPECT_NE(error.find("prompt 'capital'"), std::string::npos) << o.output;
  EXPECT_NE(error.find("zzzz-not-there"), std::string::npos) << o.output;
  // A check is a verdict on a finished run: the dump is still complete.
  auto r = dump::DumpReader::open(rank0_dump(main_run().dir / "run-expect-contains").string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->complete().value());
}

TEST(DumpContents, ExpectFirstTokens) {
  OPEN_MAIN(full);
  const auto out = full.read_output("capital");
  ASSERT_TRUE(out.ok());
  const std::vector<int32_t>& g = out->generated_ids;
  ASSERT_GE(g.size(), 3u);
  const auto list = [](std::vector<int32_t> ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
    return "{first_tokens: [" + s + "]}";
  };
  const Outcome right = run_with_expect("expect-right", list({g[0], g[1], g[2]}));
  EXPECT_EQ(right.exit_code, 0) << right.output;

  const int32_t wrong = (g[1] + 1) % kVocab;
  const Outcome bad = run_with_expect("expect-wrong", list({g[0], wrong}));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  const std::string error = line_with(bad.output, "error:");
  EXPECT_NE(error.find("prompt 'capital'"), std::string::npos) << bad.output;
  EXPECT_NE(error.find(std::to_string(wrong)), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace dayzero::e2e
