// `dayzero run --replay-from --replay-layers` on tiny models: a block replayed on the recorded
// inputs of a perturbed run reports its own error as exactly zero while the perturbed block is
// blamed; a tp2 replay (and a tp2 x ep2 one of a MoE family) agrees with the one-rank replay;
// only the replayed layers' weights are loaded; bad sources and ranges exit 2 with their
// sentence; pp > 1 is refused. Not a test of compare's metrics (compare_test.cpp).
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <set>

#include "dump/dump_writer.h"
#include "compare_util.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kLayers = 6;
// The partition tolerance of partition_invariance_test.cpp: tp-split runs of these tiny models
// agree with one rank to well under it, a tenfold rms_norm_eps does not.
constexpr double kPartitionRelL2 = 2e-6;
constexpr const char* kPerturb = "debug: {perturb: {point: layers.3.ffn_out, scale: 1.001}}\n";

std::string sizes(const std::string& family, int n_ff) {
  std::string y = "family: " + family + "\nn_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) +
                  "\nn_head: 4\nn_head_kv: 2\nn_ff: " + std::to_string(n_ff) + "\nseed: 29\n";
  if (family == "qwen3_moe") y += "head_dim: 32\nn_expert: 8\nn_expert_used: 2\nn_ff_expert: 48\n";
  return y;
}

const char* const kPromptLines =
    "prompts:\n"
    "  - {id: capital, text: \"The capital of France is\"}\n"
    "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n";
constexpr const char* kDumpAll = "  activations: {layers: all, phase: prefill, mode: full}";

std::string config(const fs::path& model, const std::string& extra, const std::string& dump_line = kDumpAll,
                   const std::string& prompts = kPromptLines) {
  return "model: {path: " + model.string() + ", dtype: float32}\n" + extra + prompts +
         "generate: {max_new_tokens: 2, stop_at_eos: false}\n"
         "watchdog: {collective_timeout_s: 20}\n"
         "dump:\n  dir: unused\n" + dump_line + "\n";
}

struct Family {
  fs::path dir, model;
  std::map<std::string, fs::path> runs;
};

Family& family(const std::string& name, int n_ff = 128) {
  static std::map<std::string, Family> cache;
  const std::string key = name + "-" + std::to_string(n_ff);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Family f;
  f.dir = scratch_dir("replay-" + key);
  f.model = f.dir / "model";
  write_file(f.dir / "sizes.yaml", sizes(name, n_ff));
  make_model_from_yaml(f.dir / "sizes.yaml", f.model, "--dtype float32");
  return cache.emplace(key, std::move(f)).first->second;
}

// Runs `dayzero run` of a config made from `text` under `label` in the family's folder; the
// flags follow (--replay-...). Returns the run folder and the outcome.
std::pair<fs::path, Outcome> run_config(Family& f, const std::string& label, int ranks, const std::string& text,
                                        const std::string& flags = "") {
  const fs::path cfg = f.dir / (label + ".yaml"), out = f.dir / ("run-" + label);
  write_file(cfg, text);
  const std::string args = "run " + cfg.string() + " --dump-dir " + out.string() + " " + flags;
  return {out, ranks == 1 ? run_dayzero(args) : run_dayzero_mpi(ranks, args)};
}

// A run made once per label that must succeed.
fs::path run(const std::string& fam, const std::string& label, int ranks, const std::string& extra,
             const std::string& flags = "", const std::string& dump_line = kDumpAll) {
  Family& f = family(fam);
  if (auto it = f.runs.find(label); it != f.runs.end()) return it->second;
  auto [out, o] = run_config(f, label, ranks, config(f.model, extra, dump_line), flags);
  EXPECT_EQ(o.exit_code, 0) << label << "\n" << o.output;
  f.runs[label] = out;
  return out;
}

fs::path source() { return run("llama", "source", 1, kPerturb); }

std::string replay_flags(const fs::path& src, const std::string& layers) {
  return "--replay-from " + src.string() + " --replay-layers " + layers;
}

// Layer 5 replayed on the perturbed run's layers.4.layer_out computes exactly what that run
// computed: zero error in both directions, and only layer 5's prefill points are compared.
TEST(Replay, BlockAfterThePerturbationHasZeroOwnError) {
  const fs::path src = source();
  const fs::path rep = run("llama", "replay_5", 1, "", replay_flags(src, "5:6"));
  for (const auto& [a, b] : {std::pair{rep, src}, std::pair{src, rep}}) {
    const Compared c = compare(a, b);
    ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
    ASSERT_FALSE(c.j.is_discarded()) << c.o.output;
    EXPECT_EQ(c.j.at("replay_layers"), json({5, 6}));
    EXPECT_TRUE(c.j.at("outputs").empty());
    ASSERT_EQ(c.j.at("groups").size(), 2u);  // two prompts, prefill only
    for (const json& g : c.j.at("groups")) {
      EXPECT_EQ(g.at("phase"), "prefill");
      ASSERT_EQ(g.at("tensors").size(), 5u) << "layer 5's five points";
      for (const json& t : g.at("tensors")) {
        EXPECT_EQ(t.at("name").get<std::string>().rfind("layers.5.", 0), 0u) << t.at("name");
        EXPECT_EQ(num(t.at("error")), 0.0) << t.at("name");
        EXPECT_EQ(num(t.at("metrics").at("max_abs")), 0.0) << t.at("name");
      }
    }
  }
  // The same layer in a full run with the perturbation is inherited, not zero: the source's
  // error there is real, and replay is what isolates the block from it.
  const fs::path clean = run("llama", "clean", 1, "");
  const Compared full = compare(clean, src);
  ASSERT_EQ(full.o.exit_code, 1) << full.o.output;
  for (const json& g : full.j.at("groups"))
    for (const json& t : g.at("tensors"))
      if (t.at("name") == "layers.5.layer_out") {
        EXPECT_EQ(t.at("verdict"), "inherited");
      }
  const std::string table = run_dayzero("compare " + rep.string() + " " + src.string()).output;
  EXPECT_NE(table.find("replay of layers 5..5 on recorded inputs"), std::string::npos) << table;
  const Outcome again = run_dayzero("run " + (family("llama").dir / "replay_5.yaml").string() + " --dump-dir " +
                                    (family("llama").dir / "run-replay_5_again").string() + " " + replay_flags(src, "5:6"));
  EXPECT_NE(again.output.find("replay of layers 5..5 on the recorded inputs of " + src.string() +
                              ": prefill only, no decode and no logits"),
            std::string::npos)
      << again.output;
}

// The perturbed layer replayed without the perturbation differs from the source at its own
// ffn_out: compare blames layer 3 (negative control of the zero above).
TEST(Replay, PerturbedBlockIsBlamed) {
  const fs::path src = source();
  const fs::path rep = run("llama", "replay_3", 1, "", replay_flags(src, "3:4"));
  const Compared c = compare(rep, src);
  ASSERT_EQ(c.o.exit_code, 1) << c.o.output;
  for (const json& g : c.j.at("groups")) {
    EXPECT_EQ(g.at("blamed_unit"), "layers.3") << g.at("prompt");
    EXPECT_EQ(g.at("blamed_point"), "layers.3.ffn_out") << g.at("prompt");
    for (const json& t : g.at("tensors"))
      if (t.at("name") == "layers.3.attn_out") {
        EXPECT_EQ(num(t.at("error")), 0.0) << "attention saw the same input";
      }
  }
}

// Only the replayed layers' tensors are read: /weights lists layers 4 and 5 and nothing else.
TEST(Replay, LoadsOnlyTheReplayedLayers) {
  const fs::path rep = run("llama", "replay_45", 1, "", replay_flags(source(), "4:6"));
  auto r = dump::DumpReader::open(rank0_dump(rep).string());
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto rows = r->read_weights();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  std::set<std::string> layers;
  for (const auto& w : rows.value()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(w.name, m, std::regex(R"(^model\.layers\.(\d+)\.)"))) << w.name << " is not a layer's";
    layers.insert(m[1]);
  }
  EXPECT_EQ(layers, (std::set<std::string>{"4", "5"}));
  EXPECT_EQ(rows->size(), 2u * 9) << "9 tensors per llama layer";
  const auto begin = r->attr_int("replay_layer_begin"), end = r->attr_int("replay_layer_end");
  const auto from = r->attr_string("replay_source");
  ASSERT_TRUE(begin.ok() && end.ok() && from.ok()) << "the replay's root attributes";
  EXPECT_EQ(*begin, 4);
  EXPECT_EQ(*end, 6);
  EXPECT_EQ(*from, source().string());
  EXPECT_FALSE(r->exists("/outputs")) << "a replay has no logits or generated tokens";
}

// tp2 splits the replayed layers' heads and FFN: agreement with the one-rank replay within the
// partition tolerance, and not bit-identical (the sums run in another order).
TEST(Replay, Tp2AgreesWithOneRank) {
  const fs::path src = source();
  const fs::path one = run("llama", "replay_45", 1, "", replay_flags(src, "4:6"));
  const fs::path tp2 = run("llama", "replay_45_tp2", 2, "parallel: {tp: 2}\n", replay_flags(src, "4:6"));
  const Compared c = compare(one, tp2);
  ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
  std::string where;
  const double w = worst_error(c.j, &where);
  std::printf("replay of layers 4..5, one rank vs tp2: worst relative L2 %.3g at %s\n", w, where.c_str());
  EXPECT_GT(w, 0.0);
  EXPECT_LT(w, kPartitionRelL2);
}

// A MoE family under tp2 x ep2: the experts of the replayed layer spread over ep ranks.
TEST(Replay, MoeTp2Ep2AgreesWithItsSource) {
  const fs::path src = run("qwen3_moe", "source", 1, "");
  const fs::path rep = run("qwen3_moe", "replay_2_ep2", 2, "parallel: {tp: 2, ep: 2}\n", replay_flags(src, "2:3"));
  const Compared c = compare(rep, src);
  ASSERT_EQ(c.o.exit_code, 0) << c.o.output;
  std::string where;
  const double w = worst_error(c.j, &where);
  std::printf("qwen3_moe replay of layer 2 under tp2 x ep2 vs one rank: worst error %.3g at %s\n", w, where.c_str());
  EXPECT_GT(w, 0.0);
  EXPECT_LT(w, kPartitionRelL2);
}

TEST(Replay, PipelineStagesAreRefused) {
  Family& f = family("llama");
  const auto [out, o] = run_config(f, "replay_pp2", 2, config(f.model, "parallel: {pp: 2}\n"),
                                   replay_flags(source(), "4:6"));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("parallel.pp=2: a replay runs its layers on one pipeline stage"), std::string::npos)
      << o.output;
}

// compare still insists on every replayed key: against a run that dumped layer_out only, the
// replay's other points of layer 5 are named.
TEST(Replay, CompareRefusesAMissingReplayedKey) {
  const fs::path lo = run("llama", "layer_out_only", 1, kPerturb, "",
                          "  activations: {layers: all, points: [layer_out], phase: prefill, mode: full}");
  const fs::path rep = run("llama", "replay_5", 1, "", replay_flags(source(), "5:6"));
  const Outcome o = run_dayzero("compare " + rep.string() + " " + lo.string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("only in " + rep.string() + ": activations/capital/prefill/layers.5.attn_norm"),
            std::string::npos)
      << o.output;
}

struct BadCase {
  const char* label;
  std::string extra, flags, prompts, want;
};

// Each bad source or range: exit 2 with its sentence, before any weight is read.
TEST(Replay, BadInputsExit2) {
  Family& f = family("llama");
  const fs::path src = source();
  const fs::path stats = run("llama", "stats", 1, "", "", "  activations: {layers: all, phase: prefill, mode: stats}");
  const fs::path lo = run("llama", "layer_out_only", 1, kPerturb, "",
                          "  activations: {layers: all, points: [layer_out], phase: prefill, mode: full}");
  Family& other = family("llama", 96);

  // A source whose layers.4.layer_out has the wrong width, written by hand.
  const fs::path bad_shape = scratch_dir("replay-bad-shape");
  int64_t n_capital = 0;  // tokens of the prompt 'capital'
  {
    auto r = dump::DumpReader::open(rank0_dump(src).string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    auto attrs = r->root_attributes();
    ASSERT_TRUE(attrs.ok());
    auto w = dump::DumpWriter::create(rank0_dump(bad_shape).string(), *attrs);
    ASSERT_TRUE(w.ok()) << w.status().message();
    for (const char* id : {"capital", "raw"}) {
      auto out = r->read_output(id);
      ASSERT_TRUE(out.ok()) << out.status().message();
      ASSERT_TRUE((*w)->write_output(*out).ok());
      auto a = r->read_activation(id, "prefill", "layers.4.layer_out");
      ASSERT_TRUE(a.ok());
      if (std::string(id) == "capital") n_capital = a->shape[0];
      ASSERT_TRUE((*w)->write_activation(id, "prefill", "layers.4.layer_out", a->data.data(), a->shape[0] * 2,
                                         a->shape[1] / 2).ok());
    }
    ASSERT_TRUE((*w)->mark_complete().ok());
    ASSERT_TRUE((*w)->close().ok());
  }

  const std::string extra_prompt = std::string(kPromptLines) + "  - {id: extra, tokens: [1, 2, 3]}\n";
  const std::string other_tokens =
      "prompts:\n  - {id: capital, text: \"The capital of France is\"}\n  - {id: raw, tokens: [3, 17, 42]}\n";
  const std::vector<BadCase> cases = {
      {"empty_range", "", replay_flags(src, "5:5"), kPromptLines, "--replay-layers 5:5: the range A:B holds layers A..B-1 and must hold at least one layer"},
      {"past_the_end", "", replay_flags(src, "5:7"), kPromptLines, "--replay-layers 5:7: the model has 6 layers (0..5), so B can be at most 6"},
      {"malformed", "", replay_flags(src, "5"), kPromptLines, "--replay-layers 5: expected A:B"},
      {"alone", "", "--replay-from " + src.string(), kPromptLines, "--replay-from and --replay-layers go together"},
      {"missing_prompt", "", replay_flags(src, "5:6"), extra_prompt, "the source run has no /outputs/extra"},
      {"missing_point", "", replay_flags(lo, "0:1"), kPromptLines,
       "the source run did not record embed of prompt 'capital' in the prefill phase, the input of layer 0"},
      {"stats_source", "", replay_flags(stats, "5:6"), kPromptLines,
       "holds layers.4.layer_out of prompt 'capital' in stats mode; a replay needs dump.activations.mode: full"},
      {"other_tokens", "", replay_flags(src, "5:6"), other_tokens,
       "prompt 'raw': this run's token ids [3 17 42] differ from the source's prompt_ids [3 17 42 99 5 250 11]"},
      {"wrong_shape", "", replay_flags(bad_shape, "5:6"), kPromptLines,
       "layers.4.layer_out of prompt 'capital' has shape [" + std::to_string(2 * n_capital) + ", 32], expected [" +
           std::to_string(n_capital) + ", 64]"},
      {"expect", "", replay_flags(src, "5:6"),
       "prompts:\n  - {id: capital, text: \"The capital of France is\", expect: {contains: Paris}}\n"
       "  - {id: raw, tokens: [3, 17, 42, 99, 5, 250, 11]}\n",
       "prompt 'capital': expect cannot be checked by a replay, which generates nothing"},
      {"not_a_run", "", replay_flags(f.dir / "nowhere", "5:6"), kPromptLines, "--replay-from " + (f.dir / "nowhere").string()},
  };
  for (const BadCase& c : cases) {
    const auto [out, o] = run_config(f, std::string("bad_") + c.label, 1, config(f.model, c.extra, kDumpAll, c.prompts), c.flags);
    EXPECT_EQ(o.exit_code, 2) << c.label << "\n" << o.output;
    EXPECT_NE(o.output.find(c.want), std::string::npos) << c.label << ": want \"" << c.want << "\"\n" << o.output;
  }
  // Another model (n_ff 96) fed this model's recorded inputs.
  const auto [out, o] = run_config(other, "bad_other_model", 1, config(other.model, ""), replay_flags(src, "5:6"));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("the source run is of another model (its model_config differs from " + other.model.string()),
            std::string::npos)
      << o.output;
}

}  // namespace
}  // namespace dayzero::e2e
