// Bad input to `dayzero run` and `dayzero inspect`: damaged safetensors files, checkpoints that
// do not match the adapter, broken index.json files, an unknown model_type, a malformed run
// config, an over-long prompt and a missing model folder. Each must exit 2 with one error
// line that names the file, tensor or key at fault, and leave no rank file marked complete.
// FP8 cases: a deepseek_v3 weight_scale_inv missing or of the wrong shape.
// The cases start from a good tiny llama made once and change one thing each.
#include <nlohmann/json.hpp>

#include <cstring>
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
Case make_fp8_case(const std::string& name) {
  static const fs::path good = [] {
    const fs::path d = scratch_dir("bad-input-good-fp8");
    make_model_from_yaml(golden_sizes("deepseek_v3_fp8"), d / "model");
    return d;
  }();
  Case c{scratch_dir("bad-input-" + name)};
  fs::copy(good / "model", c.model(), fs::copy_options::recursive);
  write_file(c.config(), "model: {path: model, dtype: float32}\n"
                         "prompts:\n"
                         "  - {id: capital, text: \"The capital of France is\"}\n"
                         "generate: {max_new_tokens: 2}\n"
                         "dump:\n"
                         "  dir: " + (c.dir / "run").string() + "\n"
                         "  activations: {layers: all, phase: both}\n");
  return c;
}

TEST(BadInput, Fp8ScaleMissing) {
  const Case c = make_fp8_case("fp8-scale-missing");
  auto tensors = read_tensors(c.st());
  const std::string scale = "model.layers.1.mlp.experts.3.down_proj.weight_scale_inv";
  ASSERT_EQ(tensors.erase(scale), 1u);
  write_tensors(c.st(), tensors);
  expect_bad_input(run_case(c), c, {scale, "missing"});
}

TEST(BadInput, Fp8ScaleMisShaped) {
  const Case c = make_fp8_case("fp8-scale-shape");
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

}  // namespace
}  // namespace dayzero::e2e
