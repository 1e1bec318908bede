// Bad input to `dayzero run` and `dayzero inspect`: damaged safetensors files, checkpoints that
// do not match the adapter, broken index.json files, an unknown model_type, a malformed run
// config, an over-long prompt and a missing model folder. Each must exit 2 with one error
// line that names the file, tensor or key at fault, and leave no rank file marked complete.
// FP8 cases: a deepseek_v3 weight_scale_inv missing or of the wrong shape. Untrusted-input
// cases: JSON nested 100k deep in every file read, FIFOs and symlinks in place of files, the
// safetensors library's own header rules, index totals, and mistyped config.json values; each
// must be refused in under 5 s (also under mpiexec -n 2).
// The cases start from a good tiny llama made once and change one thing each.
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/writer.h"
#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

const char* const kIndex = "model.safetensors.index.json";

// The good models every case copies: model/ (one file) and sharded/ (3 shards + index).
const fs::path& good_dir() {
  static const fs::path dir = [] {
    const fs::path d = scratch_dir("bad-input-good");
    make_model_from_yaml(golden_sizes("llama"), d / "model");
    make_model_from_yaml(golden_sizes("llama"), d / "sharded", "--shards 3");
    return d;
  }();
  return dir;
}

// A case folder holding a copy of the good model (or its sharded twin) at <dir>/model and a
// run config at <dir>/run.yaml that dumps into <dir>/run.
struct Case {
  fs::path dir;
  fs::path model() const { return dir / "model"; }
  fs::path config() const { return dir / "run.yaml"; }
  fs::path st() const { return model() / "model.safetensors"; }
};

Case make_case(const std::string& name, bool sharded = false) {
  Case c{scratch_dir("bad-input-" + name)};
  fs::copy(good_dir() / (sharded ? "sharded" : "model"), c.model(), fs::copy_options::recursive);
  write_file(c.config(), "model: {path: model, dtype: float32}\n"
                         "prompts:\n"
                         "  - {id: capital, text: \"The capital of France is\"}\n"
                         "generate: {max_new_tokens: 2}\n"
                         "dump:\n"
                         "  dir: " + (c.dir / "run").string() + "\n"
                         "  activations: {layers: all, phase: both}\n");
  return c;
}

// A case folder holding a copy of the tiny model of tests/data/golden/<family>.yaml (made once
// per family and make-model flags).
Case make_family_case(const std::string& name, const std::string& family, const std::string& flags = "") {
  static std::map<std::string, fs::path> good;
  const std::string key = family + (flags.empty() ? "" : "-fp8");
  DZ_CHECK(flags.empty() || flags == "--dtype fp8", "make_family_case: flags " << flags);
  if (!good.count(key)) {
    const fs::path d = scratch_dir("bad-input-good-" + key);
    make_model_from_yaml(golden_sizes(family), d / "model", flags);
    good[key] = d;
  }
  Case c{scratch_dir("bad-input-" + name)};
  fs::copy(good[key] / "model", c.model(), fs::copy_options::recursive);
  write_file(c.config(), "model: {path: model, dtype: float32}\n"
                         "prompts:\n"
                         "  - {id: capital, text: \"The capital of France is\"}\n"
                         "generate: {max_new_tokens: 2}\n"
                         "dump:\n"
                         "  dir: " + (c.dir / "run").string() + "\n");
  return c;
}

Outcome run_case(const Case& c) { return run_dayzero("run " + c.config().string()); }

// Exit code 2; exactly one line mentions an error, it is dayzero's own, and it names every
// one of names; no crash text; no rank file under the case folder is marked complete.
void expect_bad_input(const Outcome& o, const Case& c, const std::vector<std::string>& names) {
  EXPECT_EQ(o.exit_code, 2) << o.output;
  std::vector<std::string> error_lines;
  std::istringstream in(o.output);
  for (std::string line; std::getline(in, line);)
    if (line.find("error") != std::string::npos || line.find("Error") != std::string::npos)
      error_lines.push_back(line);
  ASSERT_EQ(error_lines.size(), 1u) << "want one error line:\n" << o.output;
  const std::string& e = error_lines[0];
  EXPECT_TRUE(e.rfind("dayzero: error: ", 0) == 0 || e.rfind("dayzero inspect: ", 0) == 0) << e;
  for (const std::string& n : names) EXPECT_NE(e.find(n), std::string::npos) << "does not name '" << n << "': " << e;
  for (const char* crash : {"terminate called", "what():", "Aborted", "Segmentation", "CHECK failed"})
    EXPECT_EQ(o.output.find(crash), std::string::npos) << o.output;
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(c.dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || f.path().extension() != ".h5") continue;
    auto r = dump::DumpReader::open(f.path().string());
    if (!r.ok()) continue;  // unreadable is not complete
    auto complete = r->complete();
    EXPECT_FALSE(complete.ok() && *complete) << f.path() << " is marked complete after a failed run";
  }
}

// A safetensors file as raw parts: the header JSON and the data section after it.
struct RawSafetensors {
  json header;
  std::string data;
};

RawSafetensors read_raw(const fs::path& path) {
  const std::string bytes = read_file(path);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes.at(i));
  return {json::parse(bytes.substr(8, len)), bytes.substr(8 + len)};
}

void write_raw(const fs::path& path, const RawSafetensors& f) {
  const std::string header = f.header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_file(path, out + header + f.data);
}

// Every tensor of a safetensors file with its on-disk bytes.
struct TensorBytes {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};

std::map<std::string, TensorBytes> read_tensors(const fs::path& path) {
  std::map<std::string, TensorBytes> out;
  auto f = checkpoint::SafetensorsFile::open(path.string());
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return out;
  checkpoint::ByteReader reader;
  for (const auto& t : f->tensors()) {
    TensorBytes b{t.dtype, t.shape, std::vector<uint8_t>(t.nbytes)};
    EXPECT_TRUE(reader.read(t.file, t.offset, t.nbytes, b.bytes.data()).ok()) << t.name;
    out[t.name] = std::move(b);
  }
  return out;
}

void write_tensors(const fs::path& path, const std::map<std::string, TensorBytes>& tensors) {
  checkpoint::SafetensorsWriter w;
  for (const auto& [name, t] : tensors) w.add(name, t.dtype, t.shape, t.bytes);
  const Status s = w.write(path.string());
  ASSERT_TRUE(s.ok()) << s.message();
}

// The case's checkpoint (one shard) without tensor `name`.
void remove_tensor(const Case& c, const std::string& name) {
  auto tensors = read_tensors(c.st());
  ASSERT_EQ(tensors.erase(name), 1u) << name;
  write_tensors(c.st(), tensors);
}

// The case's config.json, edited.
void edit_config(const Case& c, const std::function<void(json&)>& edit) {
  json cfg = json::parse(read_file(c.model() / "config.json"));
  edit(cfg);
  write_file(c.model() / "config.json", cfg.dump(2));
}

TEST(BadInput, TruncatedShard) {
  const Case c = make_case("truncated");
  auto f = checkpoint::SafetensorsFile::open(c.st().string());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const checkpoint::TensorInfo* last = &f->tensors().front();
  for (const auto& t : f->tensors())
    if (t.offset > last->offset) last = &t;
  ASSERT_EQ(last->offset + last->nbytes, f->file_size()) << "the last tensor ends the file";
  fs::resize_file(c.st(), f->file_size() - 100);
  expect_bad_input(run_case(c), c, {c.st().string(), last->name, "truncated"});
}

TEST(BadInput, HeaderLengthBeyondTheFile) {
  const Case c = make_case("header-length");
  const uint64_t size = fs::file_size(c.st());
  std::string bytes = read_file(c.st());
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  write_file(c.st(), bytes);
  expect_bad_input(run_case(c), c, {c.st().string(), "header length " + std::to_string(size)});
}

TEST(BadInput, OverlappingTensors) {
  const Case c = make_case("overlap");
  RawSafetensors f = read_raw(c.st());
  // model.norm.weight ([64] BF16, 128 bytes) now points into the first bytes of the embedding.
  const uint64_t embed_begin = f.header.at("model.embed_tokens.weight").at("data_offsets").at(0);
  json& norm = f.header.at("model.norm.weight");
  const uint64_t norm_bytes = norm.at("data_offsets").at(1).get<uint64_t>() - norm.at("data_offsets").at(0).get<uint64_t>();
  ASSERT_EQ(norm_bytes, 128u);
  norm["data_offsets"] = {embed_begin + 2, embed_begin + 2 + norm_bytes};
  write_raw(c.st(), f);
  expect_bad_input(run_case(c), c, {c.st().string(), "model.norm.weight", "model.embed_tokens.weight", "overlap"});
}

TEST(BadInput, TensorMissingFromTheCheckpoint) {
  const Case c = make_case("missing-tensor");
  auto tensors = read_tensors(c.st());
  ASSERT_EQ(tensors.erase("model.layers.1.mlp.up_proj.weight"), 1u);
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.st(), tensors));
  expect_bad_input(run_case(c), c, {"model.layers.1.mlp.up_proj.weight", "missing", c.model().string()});
}

TEST(BadInput, ExtraUnclaimedTensor) {
  const Case c = make_case("extra-tensor");
  auto tensors = read_tensors(c.st());
  tensors["model.layers.0.mlp.gate_up_proj.weight"] = {DType::kBF16, {2, 4}, std::vector<uint8_t>(16, 0)};
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.st(), tensors));
  expect_bad_input(run_case(c), c, {c.st().string(), "model.layers.0.mlp.gate_up_proj.weight", "not claimed"});
}

TEST(BadInput, WrongShape) {
  const Case c = make_case("wrong-shape");
  auto tensors = read_tensors(c.st());
  TensorBytes& q = tensors.at("model.layers.0.self_attn.q_proj.weight");
  ASSERT_EQ(q.shape, (Shape{64, 64}));
  q.shape = {32, 128};  // same bytes, wrong shape
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.st(), tensors));
  expect_bad_input(run_case(c), c,
                   {c.st().string(), "model.layers.0.self_attn.q_proj.weight", "[32, 128]", "[64, 64]"});
}

TEST(BadInput, UnknownDtype) {
  const Case c = make_case("unknown-dtype");
  RawSafetensors f = read_raw(c.st());
  f.header.at("model.layers.1.post_attention_layernorm.weight")["dtype"] = "F4";
  write_raw(c.st(), f);
  expect_bad_input(run_case(c), c, {c.st().string(), "model.layers.1.post_attention_layernorm.weight", "'F4'"});
}

TEST(BadInput, NanInAWeight) {
  // Found only while loading, after the run folder and rank file exist: the rank file must be
  // left incomplete.
  const Case c = make_case("nan-weight");
  auto tensors = read_tensors(c.st());
  TensorBytes& norm = tensors.at("model.norm.weight");
  ASSERT_EQ(norm.dtype, DType::kBF16);
  norm.bytes[10] = 0xc0;  // element 5 = 0x7fc0, a BF16 NaN
  norm.bytes[11] = 0x7f;
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.st(), tensors));
  const Outcome o = run_case(c);
  expect_bad_input(o, c, {c.st().string(), "model.norm.weight", "NaN"});
  EXPECT_TRUE(fs::exists(rank0_dump(c.dir / "run"))) << "the rank file is made before loading: " << o.output;
}

TEST(BadInput, IndexNamesAMissingShard) {
  const Case c = make_case("index-missing-shard", true);
  const std::string shard = "model-00002-of-00003.safetensors";
  ASSERT_TRUE(fs::remove(c.model() / shard));
  expect_bad_input(run_case(c), c, {(c.model() / kIndex).string(), "'" + shard + "'", "does not exist"});
}

TEST(BadInput, IndexPathOutsideTheModelFolder) {
  const Case c = make_case("index-outside", true);
  json index = json::parse(read_file(c.model() / kIndex));
  const std::string holder = index.at("weight_map").at("model.norm.weight");
  // The file exists there, so only the path rule can refuse it.
  fs::copy_file(c.model() / holder, c.dir / "x.safetensors");
  index["weight_map"]["model.norm.weight"] = "../x.safetensors";
  write_file(c.model() / kIndex, index.dump(2));
  expect_bad_input(run_case(c), c, {(c.model() / kIndex).string(), "'../x.safetensors'", "model.norm.weight"});
}

TEST(BadInput, UnknownModelType) {
  const Case c = make_case("unknown-model-type");
  json config = json::parse(read_file(c.model() / "config.json"));
  config["model_type"] = "mystery";
  config["architectures"] = {"MysteryForCausalLM"};
  write_file(c.model() / "config.json", config.dump(2));
  const Outcome o = run_case(c);
  expect_bad_input(o, c, {"config.json", "'mystery'", "llama, qwen2, qwen3"});
  EXPECT_EQ(o.output.find("config.json: config.json"), std::string::npos) << "the file is named twice: " << o.output;
}

TEST(BadInput, MalformedRunConfigNamesFileAndLine) {
  const Case c = make_case("malformed-yaml");
  write_file(c.config(), "model: {path: model, dtype: float32}\n"
                         "prompts:\n"
                         "  - {id: capital, text: \"The capital of France is\"}\n"
                         "generate: {max_new_tokens: 2]\n");
  const Outcome o = run_case(c);
  expect_bad_input(o, c, {"run.yaml:4:"});
}

TEST(BadInput, PromptLongerThanTheLimit) {
  const Case c = make_case("long-prompt");
  write_file(c.config(), "model: {path: model}\n"
                         "limits: {max_prompt_tokens: 3}\n"
                         "prompts:\n"
                         "  - {id: short, tokens: [1, 2, 3]}\n"
                         "  - {id: long_one, text: \"The capital of France is\"}\n"
                         "dump: {dir: " + (c.dir / "run").string() + "}\n");
  const Outcome o = run_case(c);
  expect_bad_input(o, c, {"run.yaml", "'long_one'", "limits.max_prompt_tokens (3)"});
  EXPECT_FALSE(fs::exists(c.dir / "run")) << "prompts are checked before the run folder is made";
}

// backend: cuda where no GPU is visible (or CUDA is not built in) stops before the run folder
// with one sentence; where a GPU is visible the run succeeds and there is nothing to test.
TEST(BadInput, BackendCudaWithoutADevice) {
  const Case c = make_case("cuda-no-device");
  write_file(c.config(), "backend: cuda\n" + read_file(c.config()));
  const Outcome o = run_case(c);
  if (o.exit_code == 0) GTEST_SKIP() << "a CUDA device is visible: backend: cuda ran";
  expect_bad_input(o, c, {"run.yaml", "backend: cuda"});
  EXPECT_TRUE(o.output.find("no CUDA device is visible") != std::string::npos ||
              o.output.find("not available in this build") != std::string::npos)
      << o.output;
  EXPECT_FALSE(fs::exists(c.dir / "run")) << "the backend is checked before the run folder is made";
}

TEST(BadInput, MissingModelFolder) {
  const Case c = make_case("missing-model");
  fs::remove_all(c.model());
  expect_bad_input(run_case(c), c, {c.model().string()});
}

TEST(BadInput, InspectGoodModelExitsZero) {
  const Outcome o = run_dayzero("inspect " + (good_dir() / "model").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("family      llama"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("check       ok"), std::string::npos) << o.output;
}

TEST(BadInput, InspectMissingTensorExitsTwo) {
  const Case c = make_case("inspect-missing-tensor");
  auto tensors = read_tensors(c.st());
  ASSERT_EQ(tensors.erase("model.layers.0.self_attn.v_proj.weight"), 1u);
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.st(), tensors));
  const Outcome o = run_dayzero("inspect " + c.model().string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("model.layers.0.self_attn.v_proj.weight"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("check       ok"), std::string::npos) << o.output;
}

// FP8 checkpoints (deepseek_v3, quantization_config fp8): a quantized Linear whose
// weight_scale_inv is missing or has the wrong block grid fails the check before loading.

TEST(BadInput, Fp8ScaleMissing) {
  const Case c = make_family_case("fp8-scale-missing", "deepseek_v3_fp8");
  const std::string scale = "model.layers.1.mlp.experts.3.down_proj.weight_scale_inv";
  ASSERT_NO_FATAL_FAILURE(remove_tensor(c, scale));
  expect_bad_input(run_case(c), c, {scale, "missing"});
}

TEST(BadInput, Fp8ScaleMisShaped) {
  const Case c = make_family_case("fp8-scale-shape", "deepseek_v3_fp8");
  auto tensors = read_tensors(c.st());
  const std::string scale = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv";
  ASSERT_TRUE(tensors.count(scale));
  ASSERT_EQ(tensors[scale].shape, (Shape{1, 2}));  // [88, 160] in 128x128 blocks
  const float ones[6] = {1, 1, 1, 1, 1, 1};
  tensors[scale] = {DType::kF32, {2, 3}, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(ones),
                                                              reinterpret_cast<const uint8_t*>(ones) + sizeof ones)};
  write_tensors(c.st(), tensors);
  expect_bad_input(run_case(c), c, {scale, "[2, 3]", "[1, 2]"});
}


// DeepSeek sparse attention (deepseek_v32, glm_moe_dsa): an indexer keeping no keys, a checkpoint
// without one of its tensors, or (glm_moe_dsa) per-layer indexer types of the wrong length, is
// refused with one sentence naming the key or the tensor.
TEST(BadInput, DsaIndexTopkNotPositive) {
  const Case c = make_family_case("dsa-index-topk", "deepseek_v32");
  edit_config(c, [](json& cfg) { cfg["index_topk"] = 0; });
  expect_bad_input(run_case(c), c, {"index_topk"});
}

TEST(BadInput, DsaIndexerTensorMissing) {
  const Case c = make_family_case("dsa-indexer-missing", "deepseek_v32");
  const std::string name = "model.layers.2.self_attn.indexer.wk.weight";
  ASSERT_NO_FATAL_FAILURE(remove_tensor(c, name));
  expect_bad_input(run_case(c), c, {name, "missing"});
}

TEST(BadInput, GlmIndexTopkNotPositive) {
  const Case c = make_family_case("glm-index-topk", "glm_moe_dsa");
  edit_config(c, [](json& cfg) { cfg["index_topk"] = -8; });
  expect_bad_input(run_case(c), c, {"index_topk"});
}

TEST(BadInput, GlmIndexerTensorMissing) {
  const Case c = make_family_case("glm-indexer-missing", "glm_moe_dsa");
  const std::string name = "model.layers.2.self_attn.indexer.weights_proj.weight";  // layer 2: a full one
  ASSERT_NO_FATAL_FAILURE(remove_tensor(c, name));
  expect_bad_input(run_case(c), c, {name, "missing"});
}

TEST(BadInput, GlmIndexerTypesLength) {
  const Case c = make_family_case("glm-indexer-types", "glm_moe_dsa");
  auto cfg = nlohmann::json::parse(read_file(c.model() / "config.json"));
  ASSERT_EQ(cfg["indexer_types"].size(), 4u);
  cfg["indexer_types"].erase(3);
  write_file(c.model() / "config.json", cfg.dump(2));
  expect_bad_input(run_case(c), c, {"indexer_types", "3 entries", "num_hidden_layers 4"});
}

// A sliding window shorter than the run's context: the attention blocks attend over the whole
// cache, so the run is refused naming the layer and its window (mistral: the tiny llama's
// tensors under a mistral config.json with sliding_window 4 for a 5-token prompt + 2 new).
TEST(BadInput, ContextBeyondTheSlidingWindow) {
  const Case c = make_case("sliding-window");
  edit_config(c, [](json& cfg) {
    cfg["model_type"] = "mistral";
    cfg["architectures"] = {"MistralForCausalLM"};
    cfg["sliding_window"] = 4;
  });
  expect_bad_input(run_case(c), c, {"run.yaml", "layer 0's sliding window of 4 tokens", "not implemented"});
  // The same model with a window longer than the context runs.
  edit_config(c, [](json& cfg) { cfg["sliding_window"] = 4096; });
  const Outcome ok = run_case(c);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// Hybrid linear attention (qwen3_next): a layer_types list of another length than
// num_hidden_layers is refused with one sentence naming both keys.
TEST(BadInput, LayerTypesLengthDisagreesWithLayerCount) {
  const Case c = make_family_case("layer-types", "qwen3_next");
  edit_config(c, [](json& cfg) {  // 3 of 4 layers
    cfg["layer_types"] = {"linear_attention", "full_attention", "linear_attention"};
  });
  expect_bad_input(run_case(c), c, {"layer_types", "num_hidden_layers", "3", "4"});
}

// DeepSeek-V4 (the tiny golden model): the hash-routed layer's token -> experts table missing or
// naming an expert that does not exist, a layer_types kind that is not V4's, hc_mult 0.

TEST(BadInput, V4TokenTableMissing) {
  const Case c = make_family_case("v4-tid2eid-missing", "deepseek_v4");
  const std::string name = "layers.0.ffn.gate.tid2eid";
  ASSERT_NO_FATAL_FAILURE(remove_tensor(c, name));
  expect_bad_input(run_case(c), c, {name, "missing"});
}

TEST(BadInput, V4TokenTableNamesAnExpertThatIsNotThere) {
  const Case c = make_family_case("v4-tid2eid-range", "deepseek_v4");
  auto tensors = read_tensors(c.st());
  TensorBytes& t = tensors.at("layers.0.ffn.gate.tid2eid");
  ASSERT_EQ(t.dtype, DType::kI32);
  const int32_t eight = 8;  // 8 experts: ids 0-7
  std::memcpy(t.bytes.data() + 4 * 5, &eight, 4);
  write_tensors(c.st(), tensors);
  expect_bad_input(run_case(c), c, {"layers.0.ffn.gate.tid2eid", "holds 8 at element 5", "outside [0, 8)"});
}

// The published FP8 layout: a `.scale` (UE8M0) of another block grid than its weight's.
TEST(BadInput, V4ScaleMisShaped) {
  const Case c = make_family_case("v4-scale-shape", "deepseek_v4", "--dtype fp8");
  auto tensors = read_tensors(c.st());
  const std::string scale = "layers.1.attn.wq_b.scale";
  ASSERT_EQ(tensors.at(scale).shape, (Shape{2, 1}));  // wq_b [256, 32] in 128x128 blocks
  ASSERT_EQ(tensors.at(scale).dtype, DType::kF8_E8M0);
  tensors.at(scale).shape = {1, 2};
  write_tensors(c.st(), tensors);
  expect_bad_input(run_case(c), c, {scale, "has shape [1, 2], expected [2, 1]"});
}

TEST(BadInput, V4UnknownLayerTypeAndNoResidualStreams) {
  const Case c = make_family_case("v4-config", "deepseek_v4");
  auto cfg = nlohmann::json::parse(read_file(c.model() / "config.json"));
  auto bad = cfg;
  bad["layer_types"][2] = "zz_attention";
  write_file(c.model() / "config.json", bad.dump(2));
  expect_bad_input(run_case(c), c, {"layer_types[2]", "zz_attention"});
  bad = cfg;
  bad["hc_mult"] = 0;
  write_file(c.model() / "config.json", bad.dump(2));
  expect_bad_input(run_case(c), c, {"hc_mult", "got 0"});
  write_file(c.model() / "config.json", cfg.dump(2));  // the control: the model as made runs
  const Outcome ok = run_case(c);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// ---- Untrusted input: every case ends in exit 2 within kQuickS, never a crash or a hang. ----

constexpr double kQuickS = 5.0;

// run_case with a clock; the command is killed after 30 s (exit 124) so a hang fails the test.
Outcome run_case_timed(const Case& c, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = run_shell("timeout -k 5 30 " + dayzero_bin() + " run " + c.config().string());
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

void expect_quick_bad_input(const Case& c, const std::vector<std::string>& names) {
  double s = 0;
  const Outcome o = run_case_timed(c, &s);
  expect_bad_input(o, c, names);
  EXPECT_LT(s, kQuickS) << "took " << s << " s\n" << o.output;
}

// The same case under mpiexec -n 2: every rank exits 2, together and quickly, and the output
// names the file.
void expect_quick_bad_input_mpi(const Case& c, const std::string& name) {
  const MpiOutcome m = run_dayzero_mpi_each(2, "run " + c.config().string(), c.dir / "codes", 30);
  EXPECT_EQ(m.codes, (std::vector<int>{2, 2})) << m.outcome.output;
  EXPECT_LT(m.seconds, kQuickS) << m.outcome.output;
  EXPECT_NE(m.outcome.output.find(name), std::string::npos) << m.outcome.output;
  for (const char* crash : {"terminate called", "Segmentation", "Aborted"})
    EXPECT_EQ(m.outcome.output.find(crash), std::string::npos) << m.outcome.output;
}

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The JSON text of path (an object with members) with "key": value added first.
void add_raw_member(const fs::path& path, const std::string& key, const std::string& value_text) {
  std::string text = read_file(path);
  const size_t brace = text.find('{');
  ASSERT_NE(brace, std::string::npos) << path;
  text.insert(brace + 1, "\"" + key + "\": " + value_text + ",");  // every file here has members
  write_file(path, text);
}

// A safetensors file with its header text replaced (the data section kept).
void write_header_text(const fs::path& path, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_file(path, out + header + data);
}

TEST(BadInput, DeeplyNestedJsonInEveryModelFile) {
  const std::string deep = nested_arrays(100000);  // ~200 KB, far under every size limit
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    SCOPED_TRACE(file);
    const Case c = make_case(std::string("nested-") + file);
    ASSERT_TRUE(fs::exists(c.model() / file));
    add_raw_member(c.model() / file, "x", deep);
    // The tokenizer names its files after the folder ("<model>: tokenizer.json: ...").
    expect_quick_bad_input(c, {c.model().string(), file, "nesting deeper than"});
  }
  const Case q = make_case("nested-quantization-config");
  add_raw_member(q.model() / "config.json", "quantization_config", deep);
  expect_quick_bad_input(q, {(q.model() / "config.json").string(), "nesting deeper than"});
  expect_quick_bad_input_mpi(q, (q.model() / "config.json").string());

  const Case idx = make_case("nested-index", true);
  add_raw_member(idx.model() / kIndex, "x", deep);
  expect_quick_bad_input(idx, {(idx.model() / kIndex).string(), "nesting deeper than"});
}

TEST(BadInput, DeeplyNestedShapeInASafetensorsHeader) {
  const Case c = make_case("nested-shape");
  const std::string bytes = read_file(c.st());
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes.at(i));
  std::string header = bytes.substr(8, len);
  const size_t entry = header.find("\"model.norm.weight\":{");
  ASSERT_NE(entry, std::string::npos) << header.substr(0, 200);
  const size_t shape = header.find("\"shape\":[64]", entry);
  ASSERT_NE(shape, std::string::npos);
  header.replace(shape, std::strlen("\"shape\":[64]"), "\"shape\":" + nested_arrays(100000));
  write_header_text(c.st(), header, bytes.substr(8 + len));
  expect_quick_bad_input(c, {c.st().string(), "nesting deeper than"});
  expect_quick_bad_input_mpi(c, c.st().string());
}

TEST(BadInput, FifoInPlaceOfAModelFile) {
  for (const char* file : {"model.safetensors", "config.json", "tokenizer.json", "generation_config.json"}) {
    SCOPED_TRACE(file);
    const Case c = make_case(std::string("fifo-") + file);
    ASSERT_TRUE(fs::remove(c.model() / file));
    ASSERT_EQ(::mkfifo((c.model() / file).c_str(), 0600), 0);
    expect_quick_bad_input(c, {(c.model() / file).string(), "regular file"});
  }
  const Case sharded = make_case("fifo-shard", true);
  const std::string shard = "model-00002-of-00003.safetensors";
  ASSERT_TRUE(fs::remove(sharded.model() / shard));
  ASSERT_EQ(::mkfifo((sharded.model() / shard).c_str(), 0600), 0);
  expect_quick_bad_input(sharded, {(sharded.model() / kIndex).string(), "'" + shard + "'", "regular file"});
  expect_quick_bad_input_mpi(sharded, shard);
}

// Hugging Face's cache keeps shards in blobs/ and links them from snapshots/: a link to a
// regular file is read, and the dump records where it led; a link to anything else is refused.
TEST(BadInput, SymlinkedShardsAreFollowedAndRecorded) {
  const Case c = make_case("symlink-shard", true);
  const std::string shard = "model-00002-of-00003.safetensors";
  fs::create_directories(c.dir / "blobs");
  fs::rename(c.model() / shard, c.dir / "blobs" / "0123abcd");
  fs::create_symlink("../blobs/0123abcd", c.model() / shard);
  const Outcome o = run_case(c);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  auto reader = dump::DumpReader::open(rank0_dump(c.dir / "run").string());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  auto rows = reader->read_weights();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  const json index = json::parse(read_file(c.model() / kIndex));
  const std::string blob = fs::canonical(c.dir / "blobs" / "0123abcd").string();
  int linked = 0;
  for (const dump::WeightRow& w : *rows) {
    const std::string holder = index.at("weight_map").at(w.name);
    if (holder == shard) {
      EXPECT_EQ(w.file, blob) << w.name;
      ++linked;
    } else {
      EXPECT_EQ(w.file, holder) << w.name;
    }
  }
  EXPECT_GT(linked, 0);

  const Case bad = make_case("symlink-to-device", true);
  ASSERT_TRUE(fs::remove(bad.model() / shard));
  fs::create_symlink("/dev/zero", bad.model() / shard);
  expect_quick_bad_input(bad, {(bad.model() / kIndex).string(), "'" + shard + "'", "regular file"});
  const Case dangling = make_case("symlink-dangling");
  ASSERT_TRUE(fs::remove(dangling.st()));
  fs::create_symlink("nowhere.safetensors", dangling.st());
  expect_quick_bad_input(dangling, {dangling.st().string(), "resolves to nothing"});
}

TEST(BadInput, DuplicateTensorNameInAHeader) {
  const Case c = make_case("duplicate-tensor-name");
  const std::string bytes = read_file(c.st());
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes.at(i));
  std::string header = bytes.substr(8, len);
  const size_t entry = header.find("\"model.norm.weight\":{");
  ASSERT_NE(entry, std::string::npos);
  const std::string copy = header.substr(entry, header.find('}', entry) + 1 - entry);
  header.insert(1, copy + ",");  // nlohmann alone would keep the last and never tell
  write_header_text(c.st(), header, bytes.substr(8 + len));
  expect_quick_bad_input(c, {c.st().string(), "'model.norm.weight'", "twice"});
}

TEST(BadInput, BytesAfterTheLastTensor) {
  const Case c = make_case("trailing-bytes");
  write_file(c.st(), read_file(c.st()) + std::string(16, '\0'));
  expect_quick_bad_input(c, {c.st().string(), "trailing bytes"});
}

TEST(BadInput, MetadataNotAStringMap) {
  const Case c = make_case("metadata-nested");
  RawSafetensors f = read_raw(c.st());
  f.header["__metadata__"] = {{"format", {{"nested", "pt"}}}};
  write_raw(c.st(), f);
  expect_quick_bad_input(c, {c.st().string(), "__metadata__", "'format'", "not a string"});
}

TEST(BadInput, IndexTotalSizeDisagreesWithTheTensors) {
  const Case c = make_case("index-total-size", true);
  json index = json::parse(read_file(c.model() / kIndex));
  ASSERT_TRUE(index.at("metadata").at("total_size").is_number_unsigned());
  index["metadata"]["total_size"] = index["metadata"]["total_size"].get<uint64_t>() + 2;
  write_file(c.model() / kIndex, index.dump(2));
  expect_quick_bad_input(c, {(c.model() / kIndex).string(), "metadata.total_size"});
}

TEST(BadInput, TensorClaimedByTwoShards) {
  const Case c = make_case("two-shards-claim", true);
  const json index = json::parse(read_file(c.model() / kIndex));
  const std::string holder = index.at("weight_map").at("model.norm.weight");
  const std::string other = holder == "model-00001-of-00003.safetensors" ? "model-00002-of-00003.safetensors"
                                                                           : "model-00001-of-00003.safetensors";
  auto from = read_tensors(c.model() / holder);
  auto to = read_tensors(c.model() / other);
  to["model.norm.weight"] = from.at("model.norm.weight");
  ASSERT_NO_FATAL_FAILURE(write_tensors(c.model() / other, to));
  expect_quick_bad_input(c, {"'model.norm.weight'", holder, other});
}

// A value of the wrong type in config.json is exit 2 naming the key, on every rank; before, some
// reads fell back to the default and others threw past the handlers (exit 3 on one rank).
TEST(BadInput, MistypedConfigValues) {
  const std::pair<const char*, json> cases[] = {
      {"num_key_value_heads", "2"},   {"rope_theta", "10000"},         {"tie_word_embeddings", "false"},
      {"rms_norm_eps", json::array()}, {"max_position_embeddings", 1.5}, {"model_type", 7},
      {"rope_scaling", "yarn"},        {"hidden_size", "64"},
  };
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    const Case c = make_case(std::string("mistyped-") + key);
    json config = json::parse(read_file(c.model() / "config.json"));
    config[key] = value;
    write_file(c.model() / "config.json", config.dump(2));
    expect_quick_bad_input(c, {"config.json", "'" + std::string(key) + "'"});
    if (std::string(key) == "rope_theta") expect_quick_bad_input_mpi(c, "'rope_theta'");
  }
  // null reads as absent, as transformers reads None.
  const Case n = make_case("null-value");
  json config = json::parse(read_file(n.model() / "config.json"));
  config["rope_theta"] = nullptr;
  config["rope_scaling"] = nullptr;
  write_file(n.model() / "config.json", config.dump(2));
  EXPECT_EQ(run_case(n).exit_code, 0);
}

}  // namespace
}  // namespace dayzero::e2e
