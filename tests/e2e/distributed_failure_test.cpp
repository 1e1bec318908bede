// Multi-rank runs that must fail together or read little: a NaN in a tensor only the second
// pipeline stage loads stops every rank with exit code 2 and a message naming rank 1 and the
// tensor; an explicit plan that cannot split the heads exits 2 with the reason on every rank;
// and under tp2 and pp2 each rank's /weights rows read the bytes of its own slices (worked out
// here from the plan rules, not by the product's slicing code) while the union of ranks covers
// every checkpoint tensor.
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kLayers = 4;
constexpr int kHeads = 4;
constexpr int kHeadsKv = 2;
// Well inside the ctest timeout of 300 s: a healthy job here ends in about a second, and a rank
// left behind would wait for the watchdog's 300 s collective timeout.
constexpr int kJobLimitS = 120;
constexpr double kFailTogetherS = 60;

// Layers 0-1 and 2-3 of this model fall mostly into different shards (make-model balances
// shards by bytes in tensor order), and under pp2 layer 3 is the second stage's alone.
const char* const kNanTensor = "model.layers.3.mlp.gate_proj.weight";

// A 4-layer f32 llama in two shards, made once.
const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("distributed-failure-model");
    write_file(d / "sizes.yaml", "family: llama\nn_vocab: 512\nn_embd: 64\nn_layer: " + std::to_string(kLayers) +
                                     "\nn_head: " + std::to_string(kHeads) + "\nn_head_kv: " +
                                     std::to_string(kHeadsKv) + "\nn_ff: 128\nseed: 31\n");
    make_model_from_yaml(d / "sizes.yaml", d / "model", "--dtype float32 --shards 2");
    return d / "model";
  }();
  return dir;
}

std::string run_config(const fs::path& model, const std::string& parallel) {
  return "model: {path: " + model.string() + ", dtype: float32}\n"
         "parallel: " + parallel + "\n"
         "prompts:\n"
         "  - {id: capital, text: \"The capital of France is\"}\n"
         "  - {id: raw, tokens: [3, 17, 42, 99, 5]}\n"
         "generate: {max_new_tokens: 3, stop_at_eos: false}\n"
         "dump:\n"
         "  dir: unused-overridden-by-dump-dir\n"
         "  activations: {layers: all, phase: prefill}\n";
}

// Every line of output that contains needle.
std::vector<std::string> lines_with(const std::string& output, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  return lines;
}

// No rank file of a failed run may claim to be complete.
void expect_no_complete_rank_file(const fs::path& run_dir, int world) {
  for (int r = 0; r < world; ++r) {
    if (!fs::exists(rank_dump(run_dir, r))) continue;
    auto reader = dump::DumpReader::open(rank_dump(run_dir, r).string());
    if (!reader.ok()) continue;  // a file closed mid-write is not complete either
    auto complete = reader->complete();
    EXPECT_TRUE(complete.ok() && !*complete) << rank_dump(run_dir, r) << " is marked complete after a failed run";
  }
}

TEST(DistributedFailure, NanSeenByTheSecondStageOnlyStopsEveryRank) {
  const fs::path dir = scratch_dir("distributed-failure-nan");
  ASSERT_FALSE(model_dir().empty());
  fs::copy(model_dir(), dir / "model", fs::copy_options::recursive);
  write_file(dir / "run.yaml", run_config(dir / "model", "{dp: 1, pp: 2, tp: 1}"));

  // The clean copy runs: whatever fails below is the NaN.
  const MpiOutcome clean = run_dayzero_mpi_each(2, "run " + (dir / "run.yaml").string() + " --dump-dir " +
                                                       (dir / "run-clean").string(), dir / "codes-clean", kJobLimitS);
  ASSERT_EQ(clean.codes, (std::vector<int>{0, 0})) << clean.outcome.output;
  // Only rank 1 (the second stage) reads the tensor that gets the NaN.
  for (int r = 0; r < 2; ++r) {
    auto reader = dump::DumpReader::open(rank_dump(dir / "run-clean", r).string());
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    auto rows = reader->read_weights();
    ASSERT_TRUE(rows.ok()) << rows.status().message();
    bool reads = false;
    for (const dump::WeightRow& w : *rows) reads = reads || w.name == kNanTensor;
    EXPECT_EQ(reads, r == 1) << "rank " << r << (reads ? " reads " : " does not read ") << kNanTensor;
  }

  auto catalog = checkpoint::Catalog::open((dir / "model").string());
  ASSERT_TRUE(catalog.ok()) << catalog.status().message();
  const checkpoint::TensorInfo* in_catalog = catalog->find(kNanTensor);
  ASSERT_NE(in_catalog, nullptr);
  const std::string shard = in_catalog->file;
  EXPECT_EQ(fs::path(shard).filename(), "model-00002-of-00002.safetensors");
  auto header = checkpoint::SafetensorsFile::open(shard);
  ASSERT_TRUE(header.ok()) << header.status().message();
  const checkpoint::TensorInfo* t = header->find(kNanTensor);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->dtype, DType::kF32);
  ASSERT_GE(t->nbytes, 4096u);
  {
    // A quiet NaN over one f32 element in the middle of the tensor's data.
    const uint32_t nan_bits = 0x7fc00000u;
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << shard;
    f.seekp(static_cast<std::streamoff>(t->offset + t->nbytes / 2));
    f.write(reinterpret_cast<const char*>(&nan_bits), sizeof nan_bits);
    ASSERT_TRUE(f.good()) << shard;
  }

  const MpiOutcome o = run_dayzero_mpi_each(2, "run " + (dir / "run.yaml").string() + " --dump-dir " +
                                                   (dir / "run-nan").string(), dir / "codes-nan", kJobLimitS);
  EXPECT_NE(o.outcome.exit_code, 124) << "the job hung until killed after " << kJobLimitS << " s\n" << o.outcome.output;
  EXPECT_LT(o.seconds, kFailTogetherS) << o.outcome.output;
  EXPECT_EQ(o.codes, (std::vector<int>{2, 2})) << "every rank exits 2 (bad input)\n" << o.outcome.output;
  const std::vector<std::string> errors = lines_with(o.outcome.output, "error:");
  ASSERT_FALSE(errors.empty()) << o.outcome.output;
  bool named = false;
  for (const std::string& e : errors)
    named = named || (e.find("rank 1") != std::string::npos && e.find(kNanTensor) != std::string::npos &&
                      e.find("NaN") != std::string::npos);
  EXPECT_TRUE(named) << "an error line names rank 1, the tensor and the NaN\n" << o.outcome.output;
  EXPECT_TRUE(lines_with(o.outcome.output, "rank 0:").empty()) << "rank 0 did not fail\n" << o.outcome.output;

  // The plan that failed is the one that puts layer 3 on the second stage alone.
  const json plan = json::parse(read_file(dir / "run-nan" / "plan.json"), nullptr, false);
  ASSERT_FALSE(plan.is_discarded());
  ASSERT_EQ(plan.at("stages").size(), 2u);
  EXPECT_LE(plan.at("stages")[0].value("layer_end", 99), 3);
  EXPECT_LE(plan.at("stages")[1].value("layer_begin", 99), 3);
  EXPECT_GT(plan.at("stages")[1].value("layer_end", -1), 3);
  expect_no_complete_rank_file(dir / "run-nan", 2);
}

TEST(DistributedFailure, ImpossibleExplicitPlanExitsTwoWithTheReason) {
  const fs::path dir = scratch_dir("distributed-failure-plan");
  ASSERT_FALSE(model_dir().empty());
  write_file(dir / "run.yaml", run_config(model_dir(), "{tp: 3}"));
  const MpiOutcome o = run_dayzero_mpi_each(3, "run " + (dir / "run.yaml").string() + " --dump-dir " +
                                                   (dir / "run").string(), dir / "codes", kJobLimitS);
  EXPECT_NE(o.outcome.exit_code, 124) << o.outcome.output;
  EXPECT_LT(o.seconds, kFailTogetherS) << o.outcome.output;
  EXPECT_EQ(o.codes, (std::vector<int>{2, 2, 2})) << o.outcome.output;
  const std::vector<std::string> errors = lines_with(o.outcome.output, "error:");
  ASSERT_EQ(errors.size(), 1u) << "one error line for the job\n" << o.outcome.output;
  EXPECT_NE(errors[0].find("tp=3"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(std::to_string(kHeads) + " attention heads are not divisible by 3"), std::string::npos)
      << errors[0];
  expect_no_complete_rank_file(dir / "run", 3);
}

// The bytes a rank owns of each checkpoint tensor, from the plan rules of docs/design.md and
// plan.json's stages: whole tensors of its stage's layers; the embedding with the first stage
// and the final norm and lm_head with the last; then, over tp, q/k/v/gate/up rows and o/down
// columns split evenly in whole heads (kv heads shared when tp exceeds them), embedding and
// lm_head rows in vocabulary ranges of ceil(n / tp), norms whole.
std::map<std::string, uint64_t> owned_bytes(const checkpoint::Catalog& catalog, const json& plan, int rank) {
  const json& coord = plan.at("ranks").at(rank);
  const json& stage = plan.at("stages").at(coord.at("pp").get<int>());
  const int tp = plan.at("tp"), tp_rank = coord.at("tp");
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::map<std::string, uint64_t> owned;
  for (const checkpoint::TensorInfo& t : catalog.tensors()) {
    const std::string& n = t.name;
    bool held;
    if (n.rfind("model.layers.", 0) == 0) {
      const int layer = std::stoi(n.substr(13));
      held = layer >= stage.at("layer_begin").get<int>() && layer < stage.at("layer_end").get<int>();
    } else if (n == "model.embed_tokens.weight") {
      held = stage.at("has_embedding").get<bool>();
    } else {
      held = stage.at("has_lm_head").get<bool>();  // model.norm.weight, lm_head.weight
    }
    if (!held) continue;
    const uint64_t rows = static_cast<uint64_t>(t.shape[0]);
    const uint64_t row_bytes = t.nbytes / rows;
    uint64_t bytes = t.nbytes;
    if (ends_with(n, "k_proj.weight") || ends_with(n, "v_proj.weight")) {
      bytes = tp <= kHeadsKv ? t.nbytes / tp : t.nbytes / kHeadsKv;
    } else if (ends_with(n, "q_proj.weight") || ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight") ||
               ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight")) {
      bytes = t.nbytes / tp;
    } else if (n == "model.embed_tokens.weight" || n == "lm_head.weight") {
      const uint64_t share = (rows + tp - 1) / tp;
      const uint64_t begin = std::min<uint64_t>(rows, share * tp_rank), end = std::min<uint64_t>(rows, begin + share);
      bytes = (end - begin) * row_bytes;
    }
    owned[n] = bytes;
  }
  return owned;
}

struct LoadCase {
  const char* name;
  std::string parallel;
};

void PrintTo(const LoadCase& c, std::ostream* os) { *os << c.name; }

class StreamingLoad : public ::testing::TestWithParam<LoadCase> {};

TEST_P(StreamingLoad, EachRankReadsOnlyItsOwnSlices) {
  const LoadCase& c = GetParam();
  const fs::path dir = scratch_dir(std::string("distributed-failure-load-") + c.name);
  ASSERT_FALSE(model_dir().empty());
  write_file(dir / "run.yaml", run_config(model_dir(), c.parallel));
  const Outcome o = run_dayzero_mpi(2, "run " + (dir / "run.yaml").string() + " --dump-dir " + (dir / "run").string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const json plan = json::parse(read_file(dir / "run" / "plan.json"), nullptr, false);
  ASSERT_FALSE(plan.is_discarded());
  auto catalog = checkpoint::Catalog::open(model_dir().string());
  ASSERT_TRUE(catalog.ok()) << catalog.status().message();
  ASSERT_EQ(catalog->files().size(), 2u);

  std::set<std::string> loaded_anywhere;
  for (int r = 0; r < 2; ++r) {
    const std::string who = std::string(c.name) + " rank " + std::to_string(r);
    const std::map<std::string, uint64_t> owned = owned_bytes(*catalog, plan, r);
    auto reader = dump::DumpReader::open(rank_dump(dir / "run", r).string());
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    auto rows = reader->read_weights();
    ASSERT_TRUE(rows.ok()) << rows.status().message();
    uint64_t read = 0, own = 0;
    std::set<std::string> names;
    for (const dump::WeightRow& w : *rows) {
      EXPECT_TRUE(names.insert(w.name).second) << who << ": " << w.name << " has two /weights rows";
      const auto it = owned.find(w.name);
      if (it == owned.end()) {
        ADD_FAILURE() << who << " read " << w.bytes_read << " bytes of " << w.name << ", which it does not own";
        read += w.bytes_read;
        continue;
      }
      // Every owned byte must be read; strided dim-1 slices too read only their own columns.
      EXPECT_GE(w.bytes_read, it->second) << who << ": " << w.name;
      EXPECT_LE(w.bytes_read, it->second) << who << ": " << w.name << " read past its slice";
      read += w.bytes_read;
    }
    for (const auto& [name, bytes] : owned) {
      own += bytes;
      EXPECT_TRUE(names.count(name)) << who << " owns " << name << " but has no /weights row for it";
    }
    std::printf("[ bytes    ] %s read %llu bytes, owns %llu, checkpoint %llu\n", who.c_str(),
                static_cast<unsigned long long>(read), static_cast<unsigned long long>(own),
                static_cast<unsigned long long>(catalog->total_bytes()));
    EXPECT_LE(static_cast<double>(read), 1.05 * static_cast<double>(own)) << who;
    EXPECT_LT(read, catalog->total_bytes()) << who << " read as much as the whole checkpoint";
    loaded_anywhere.insert(names.begin(), names.end());
  }
  for (const checkpoint::TensorInfo& t : catalog->tensors())
    EXPECT_TRUE(loaded_anywhere.count(t.name)) << c.name << ": no rank read " << t.name;
}

INSTANTIATE_TEST_SUITE_P(Plans, StreamingLoad,
                         ::testing::Values(LoadCase{"tp2", "{dp: 1, pp: 1, tp: 2}"},
                                           LoadCase{"pp2", "{dp: 1, pp: 2, tp: 1}"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dayzero::e2e
