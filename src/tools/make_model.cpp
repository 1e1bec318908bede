// make-model: random weights per tensor spec, scaled so activations stay near unit RMS and
// the top-1 logit margins are clear (generated-token comparisons must not hinge on near-ties).
#include "tools/make_model.h"

#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/fp4.h"
#include "checkpoint/fp8.h"
#include "checkpoint/pack_quantized.h"
#include "checkpoint/writer.h"
#include "core/json.h"
#include "model/fp4_specs.h"
#include "model/stored_specs.h"
#include "model/registry.h"
#include "tools/bpe_trainer.h"

namespace dayzero::tools {
using namespace dayzero::model;  // adapters, specs and shapes of the family being generated
namespace fs = std::filesystem;
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Training text for the self-contained tokenizer: plain English so generated text decodes
// into word-like pieces.
constexpr const char* kTokenizerText =
    "The capital of France is Paris. The capital of Italy is Rome. The capital of Japan is Tokyo. "
    "A large language model reads text as tokens and predicts the next token. "
    "Day zero is the day a new model is released and every cluster team tries to run it. "
    "The cat sat on the mat. The dog ran in the park. One, two, three, four, five, six, seven. "
    "What is in this picture? It is a photo of a cat sitting on a red chair near the window. "
    "def main():\n    return 0\n\nfor i in range(10):\n    print(i)\n"
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026. Questions, answers, and more questions. "
    "Tensor parallel ranks share a node; pipeline stages span nodes; experts spread over ranks.";

// The English text above plus made-up words from syllables, each written twice so that BPE
// finds enough pairs to fill a vocabulary of a few thousand tokens.
std::string tokenizer_training_text(int vocab) {
  static const char* kOnsets[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh", "th", "st", "tr", "pl"};
  static const char* kVowels[] = {"a", "e", "i", "o", "u", "ai", "ou", "ee"};
  std::string text = kTokenizerText;
  const int n_words = vocab * 2;
  for (int w = 0; w < n_words; ++w) {
    std::string word;
    for (int x = w + 1; x > 0; x /= 160) word += std::string(kOnsets[x % 20]) + kVowels[(x / 20) % 8];
    text += " " + word + " " + word;
  }
  return text;
}

// Scale of the uniform draw for a tensor: Linear weights keep the RMS of their input
// (U(-a, a) with a = sqrt(3 / fan_in)); lm_head is sharper for clear top-1 margins.
struct Init {
  float scale;
  float offset;
};
Init init_for(const TensorSpec& s) {
  const std::string& n = s.name;
  const auto ends_with = [&](const char* suffix) {
    const std::string x(suffix);
    return n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
  };
  // CLIP's LayerNorms: layer_norm1/2, pre_layrnorm (sic), post_layernorm.
  if (ends_with("norm.weight") || ends_with("norm1.weight") || ends_with("norm2.weight")) return {0.1f, 1.0f};
  if (ends_with(".bias")) return {0.1f, 0.0f};
  if (n == "model.embed_tokens.weight" || n == "language_model.model.embed_tokens.weight" || n == "embed.weight")
    return {std::sqrt(3.0f), 0.0f};
  // A conv weight [out, C, kh, kw] is a Linear over C * kh * kw inputs.
  const float fan_in = static_cast<float>(s.shape.size() > 2 ? shape_numel(s.shape) / s.shape[0] : s.shape.back());
  if (n == "lm_head.weight" || n == "language_model.lm_head.weight" || n == "head.weight") return {2.5f * std::sqrt(3.0f / fan_in), 0.0f};
  return {std::sqrt(3.0f / fan_in), 0.0f};
}

std::vector<uint8_t> make_tensor_bytes(const TensorSpec& s, uint64_t seed, DType dtype) {
  const auto n = static_cast<uint64_t>(shape_numel(s.shape));
  const Init init = init_for(s);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = init.offset + init.scale * synthetic_uniform(seed, s.name, i);
  std::vector<uint8_t> bytes(n * dtype_size(dtype));
  convert_from_f32(dtype, v.data(), bytes.data(), n);
  return bytes;
}

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  if (!f) return Status::IoError("cannot write " + p.string());
  return Status::Ok();
}

Result<std::string> read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return Status::NotFound("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Tokenizer files into out_dir; returns (vocab size, bos id, eos id).
struct TokenizerIds {
  int64_t vocab = 0;
  int32_t bos = -1, eos = -1;
  int32_t placeholder = -1;  // the adapter's image placeholder token
};
Result<TokenizerIds> write_tokenizer(const MakeModelOptions& o, const std::string& placeholder, const fs::path& out) {
  nlohmann::json tok;
  nlohmann::json tok_config = nlohmann::json::object();
  if (o.tokenizer_dir.empty()) {
    const int vocab = static_cast<int>(std::min<int64_t>(o.shape.n_vocab, 4096));
    DZ_ASSIGN_OR_RETURN(std::string text, train_byte_level_tokenizer_json(
                                              tokenizer_training_text(vocab), vocab, {"<|begin_of_text|>", "<|end_of_text|>"}));
    DZ_ASSIGN_OR_RETURN(tok, parse_json_limited(text, "trained tokenizer.json"));
    // BOS comes from the post-processor, as in Llama 3's tokenizer.json: transformers 5
    // applies tokenizer.json's post-processor and ignores add_bos_token when one exists.
    int64_t bos = -1;
    for (const auto& t : tok["added_tokens"])
      if (t["content"] == "<|begin_of_text|>") bos = t["id"].get<int64_t>();
    const nlohmann::json bos_piece = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    tok["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos_piece,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
    if (!placeholder.empty()) {
      // The image placeholder, a special token after the trained vocabulary (as Kimi's
      // <|media_pad|> or llava's <image> are added tokens of their tokenizers).
      int64_t next = 0;
      for (const auto& [k, v] : tok["model"]["vocab"].items()) next = std::max<int64_t>(next, v.get<int64_t>() + 1);
      for (const auto& t : tok["added_tokens"]) next = std::max<int64_t>(next, t["id"].get<int64_t>() + 1);
      tok["added_tokens"].push_back({{"id", next}, {"content", placeholder}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    tok_config = {{"bos_token", "<|begin_of_text|>"},
                  {"eos_token", "<|end_of_text|>"},
                  {"tokenizer_class", "PreTrainedTokenizerFast"},
                  {"model_max_length", o.shape.max_position}};
  } else {
    DZ_ASSIGN_OR_RETURN(std::string text, read_text(fs::path(o.tokenizer_dir) / "tokenizer.json"));
    DZ_ASSIGN_OR_RETURN(tok, parse_json_limited(text, o.tokenizer_dir + "/tokenizer.json"));
    auto cfg = read_text(fs::path(o.tokenizer_dir) / "tokenizer_config.json");
    if (cfg.ok()) {
      DZ_ASSIGN_OR_RETURN(tok_config, parse_json_limited(*cfg, o.tokenizer_dir + "/tokenizer_config.json"));
    }
  }
  TokenizerIds ids;
  std::map<std::string, int64_t> by_content;
  if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object())
    for (auto& [k, v] : tok["model"]["vocab"].items()) {
      ids.vocab = std::max<int64_t>(ids.vocab, v.get<int64_t>() + 1);
      by_content[k] = v.get<int64_t>();
    }
  if (tok.contains("added_tokens"))
    for (const auto& t : tok["added_tokens"]) {
      ids.vocab = std::max<int64_t>(ids.vocab, t["id"].get<int64_t>() + 1);
      by_content[t["content"].get<std::string>()] = t["id"].get<int64_t>();
    }
  const auto token_id = [&](const char* key) -> int32_t {
    if (!tok_config.contains(key)) return -1;
    const auto& v = tok_config[key];
    const std::string s = v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
    auto it = by_content.find(s);
    return it == by_content.end() ? -1 : static_cast<int32_t>(it->second);
  };
  ids.bos = token_id("bos_token");
  ids.eos = token_id("eos_token");
  if (auto it = by_content.find(placeholder); !placeholder.empty() && it != by_content.end())
    ids.placeholder = static_cast<int32_t>(it->second);
  DZ_RETURN_IF_ERROR(write_text(out / "tokenizer.json", tok.dump()));
  DZ_RETURN_IF_ERROR(write_text(out / "tokenizer_config.json", tok_config.dump(2)));
  return ids;
}

}  // namespace

float synthetic_uniform(uint64_t seed, const std::string& name, uint64_t i) {
  const uint64_t r = splitmix64(splitmix64(seed ^ fnv1a(name)) + i);
  return static_cast<float>(r >> 40) * (1.0f / 8388608.0f) - 1.0f;  // 24 bits -> [-1, 1), exact
}

namespace {
// Writes the whole model folder into out (which exists and is empty).
Status write_model(const MakeModelOptions& o, const Adapter* adapter, const fs::path& out);
}  // namespace

Status make_model(const MakeModelOptions& o) {
  DZ_ASSIGN_OR_RETURN(const Adapter* adapter, find_adapter_by_family(o.family));
  if (o.out_dir.empty()) return Status::InvalidArgument("make-model: --out is required");
  return write_model_folder(o.out_dir, [&](const fs::path& tmp) { return write_model(o, adapter, tmp); });
}

Status write_model_folder(const std::string& out_dir, const std::function<Status(const fs::path&)>& write) {
  const fs::path out = fs::absolute(fs::path(out_dir)).lexically_normal();
  const fs::path target = out.has_filename() ? out : out.parent_path();  // "dir/" names dir
  std::error_code ec;
  // An existing folder is replaced only when it is empty or a model folder (config.json).
  const bool exists = fs::exists(target, ec);
  if (exists) {
    if (!fs::is_directory(target, ec))
      return Status::InvalidArgument("make-model: " + target.string() + " exists and is not a folder");
    if (!fs::is_empty(target, ec) && !fs::exists(target / "config.json", ec))
      return Status::InvalidArgument("make-model: " + target.string() +
                                     " exists, is not empty and holds no config.json; refusing to replace it");
  }
  // Written into a sibling and renamed at the end, so a failure never leaves half a model.
  fs::create_directories(target.parent_path(), ec);
  if (ec) return Status::IoError("make-model: cannot create " + target.parent_path().string() + ": " + ec.message());
  const std::string tag = ".make-model-" + std::to_string(::getpid());
  const fs::path tmp = target.parent_path() / (target.filename().string() + tag);
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return Status::IoError("make-model: cannot create " + tmp.string() + ": " + ec.message());
  Status s = write(tmp);
  if (s.ok() && exists) {
    const fs::path old = target.parent_path() / (target.filename().string() + tag + ".old");
    fs::rename(target, old, ec);
    if (!ec) fs::remove_all(old, ec);
    if (ec) s = Status::IoError("make-model: cannot replace " + target.string() + ": " + ec.message());
  }
  if (s.ok()) {
    fs::rename(tmp, target, ec);
    if (ec) s = Status::IoError("make-model: cannot rename " + tmp.string() + " to " + target.string() + ": " + ec.message());
  }
  if (!s.ok()) fs::remove_all(tmp, ec);
  return s;
}

namespace {

Status write_model(const MakeModelOptions& o, const Adapter* adapter, const fs::path& out) {
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16 && o.dtype != DType::kF32 && o.dtype != DType::kF8_E4M3)
    return Status::InvalidArgument(std::string("make-model: dtype ") + dtype_name(o.dtype) +
                                   " is not one of BF16, F16, F32, F8_E4M3");
  // fp8: DeepSeek's layout, block-quantized Linears (E4M3, 128x128 F32 scale_inv), the rest bf16.
  const bool fp8 = o.dtype == DType::kF8_E4M3;
  const DType dense_dtype = fp8 ? DType::kBF16 : o.dtype;
  if (o.shards < 1) return Status::InvalidArgument("make-model: --shards must be at least 1");

  DZ_ASSIGN_OR_RETURN(TokenizerIds tids, write_tokenizer(o, adapter->image_placeholder_text(), out));
  ModelShape shape = o.shape;
  adapter->fill_tiny_defaults(shape);
  shape.n_vocab = std::max(shape.n_vocab, tids.vocab);
  shape.bos_id = tids.bos;
  shape.eos_id = tids.eos;
  shape.image_token_id = tids.placeholder;
  shape.torch_dtype = o.dtype == DType::kF32 ? "float32" : o.dtype == DType::kF16 ? "float16" : "bfloat16";
  // A family whose release has its own quantized layout writes its quantization_config for it
  // (deepseek_v4: FP8 with UE8M0 scales, MXFP4 experts in place); the others get DeepSeek-V3's
  // FP8 or compressed-tensors' FP4 below.
  if (fp8) shape.quant = "fp8";
  if (!o.fp4.empty()) shape.quant = o.fp4;
  nlohmann::json config = adapter->make_config(shape);
  const bool own_quant = config.contains("quantization_config");
  if (fp8 && !config.contains("quantization_config"))
    config["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                     {"weight_block_size", {128, 128}}};
  for (const auto& [key, value] : o.config_overrides.items()) config[key] = value;
  DZ_RETURN_IF_ERROR(write_text(out / "config.json", config.dump(2)));
  if (const nlohmann::json pre = adapter->make_preprocessor_config(config); !pre.is_null())
    DZ_RETURN_IF_ERROR(write_text(out / "preprocessor_config.json", pre.dump(2)));
  nlohmann::json gen = {{"do_sample", false}};
  if (tids.bos >= 0) gen["bos_token_id"] = tids.bos;
  if (tids.eos >= 0) gen["eos_token_id"] = tids.eos;
  DZ_RETURN_IF_ERROR(write_text(out / "generation_config.json", gen.dump(2)));

  // The specs come from parsing the config we just wrote: what the loader will expect.
  auto parsed = adapter->parse_hparams(config);
  if (!parsed.ok()) return parsed.status().with_context("the sizes give an invalid " + o.family + " config");
  const HParams hp = std::move(parsed).value();
  std::vector<TensorSpec> specs = adapter->tensor_specs(hp);
  std::set<std::string> scale_names;  // written with their weight
  // FP4: the routed experts in compressed-tensors' layout, every other Linear on the ignore list
  // (as published checkpoints list them); config.json is written again with the config.
  if (!o.fp4.empty() && !own_quant) {
    const StoredFormat* f = find_stored_format(o.fp4);
    if (!f || !is_fp4(f->scheme))
      return Status::InvalidArgument("make-model: '" + o.fp4 + "' is not an FP4 format (mxfp4, nvfp4)");
    config["quantization_config"] = checkpoint::fp4_quant_config(f->scheme, model::fp4_ignore_list(specs));
    DZ_ASSIGN_OR_RETURN(auto quant, checkpoint::parse_fp4_quant(config, "make-model"));
    DZ_RETURN_IF_ERROR(model::apply_fp4_quant(specs, *quant));
    DZ_RETURN_IF_ERROR(write_text(out / "config.json", config.dump(2)));
  }
  if (!o.fp4.empty()) {
    for (const auto& s : specs)
      if (s.stored.format && s.component == model::Component::kQuantScale) scale_names.insert(s.name);
    if (scale_names.empty())
      return Status::Unsupported("make-model: the " + o.family + " adapter declares no routed experts to store in " + o.fp4);
  }
  for (const auto& s : specs)
    if (model::is_stored_weight(s) && !s.stored.scale.empty()) scale_names.insert(s.stored.scale);
  if (fp8 && scale_names.empty())
    return Status::Unsupported("make-model: the " + o.family + " adapter does not declare FP8 weights");
  // INT4: the companions of pack-quantized weights are written with their weight.
  bool packed = false;
  for (const auto& s : specs)
    if (model::is_stored_weight(s, StoredScheme::kInt4Group)) {
      packed = true;
      const std::string module = s.name.substr(0, s.name.size() - 7);
      for (const auto& n : {checkpoint::packed_name(module), checkpoint::group_scale_name(module),
                            checkpoint::weight_shape_name(module)})
        scale_names.insert(n);
    }
  if (o.shape.quant == "int4" && !packed)
    return Status::Unsupported("make-model: the " + o.family + " adapter does not declare INT4 weights");

  // Tensors are assigned to shards in spec order, balanced by bytes.
  uint64_t total = 0;
  for (const auto& s : specs) total += static_cast<uint64_t>(shape_numel(s.shape)) * dtype_size(o.dtype);
  const uint64_t per_shard = (total + o.shards - 1) / o.shards;
  std::map<std::string, std::string> weight_map;
  checkpoint::SafetensorsWriter writer;
  uint64_t in_shard = 0, written = 0;
  int shard = 0;
  const auto shard_name = [&](int i) {
    if (o.shards == 1) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, o.shards);
    return std::string(buf);
  };
  const auto flush = [&]() -> Status {
    writer.set_metadata({{"format", "pt"}});
    DZ_RETURN_IF_ERROR(writer.write((out / shard_name(shard)).string()));
    writer = checkpoint::SafetensorsWriter();
    in_shard = 0;
    ++shard;
    return Status::Ok();
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const bool last = i + 1 == specs.size();
    if (scale_names.count(s.name)) {
      if (last) DZ_RETURN_IF_ERROR(flush());
      continue;
    }
    const StoredScheme scheme = model::is_stored_weight(s) ? s.stored.format->scheme : StoredScheme::kFp8Block;
    if (model::is_stored_weight(s) && is_fp4(scheme)) {
      const std::vector<uint8_t> f32 = make_tensor_bytes(s, o.seed, DType::kF32);
      const checkpoint::Fp4Packed p =
          checkpoint::fp4_quantize(reinterpret_cast<const float*>(f32.data()), s.shape[0], s.shape[1], scheme);
      const checkpoint::StoredLayout l = model::stored_layout(s);
      const bool nv = scheme == StoredScheme::kNvfp4;
      const bool in_place = s.stored.placement == model::StoredPlacement::kOwnName;
      const int64_t groups = (s.shape[1] + s.stored.block_cols - 1) / s.stored.block_cols;
      in_shard += p.packed.size() + p.scale.size() + (nv ? 4 : 0);
      written += p.packed.size() + p.scale.size() + (nv ? 4 : 0);
      weight_map[l.values] = weight_map[l.scale] = shard_name(shard);
      // DeepSeek-V4 stores its codes as I8 and its scales as F8_E8M0; compressed-tensors U8.
      writer.add(l.values, in_place ? DType::kI8 : DType::kU8, {s.shape[0], (s.shape[1] + 1) / 2}, p.packed);
      writer.add(l.scale, nv ? DType::kF8_E4M3 : in_place ? DType::kF8_E8M0 : DType::kU8, {s.shape[0], groups},
                 p.scale);
      if (nv) {
        std::vector<uint8_t> g(4);
        std::memcpy(g.data(), &p.global_scale, 4);
        weight_map[l.global] = shard_name(shard);
        writer.add(l.global, DType::kF32, {1}, std::move(g));
      }
    } else if (model::is_stored_weight(s, StoredScheme::kInt4Group)) {
      const std::vector<uint8_t> f32 = make_tensor_bytes(s, o.seed, DType::kF32);
      checkpoint::PackQuant q;
      q.group_size = s.stored.block_cols;
      const checkpoint::PackedWeight pw =
          checkpoint::pack_quantize(reinterpret_cast<const float*>(f32.data()), s.shape[0], s.shape[1], q);
      const std::string module = s.name.substr(0, s.name.size() - 7);
      std::vector<uint8_t> words(pw.packed.size() * 4), scales(pw.scale_bf16.size() * 2), dims(8);
      std::memcpy(words.data(), pw.packed.data(), words.size());
      std::memcpy(scales.data(), pw.scale_bf16.data(), scales.size());
      const int32_t d2[2] = {static_cast<int32_t>(s.shape[0]), static_cast<int32_t>(s.shape[1])};
      std::memcpy(dims.data(), d2, 8);
      in_shard += words.size() + scales.size() + dims.size();
      written += words.size() + scales.size() + dims.size();
      for (const auto& n : {checkpoint::packed_name(module), checkpoint::group_scale_name(module),
                            checkpoint::weight_shape_name(module)})
        weight_map[n] = shard_name(shard);
      writer.add(checkpoint::packed_name(module), DType::kI32, {s.shape[0], q.words(s.shape[1])}, std::move(words));
      writer.add(checkpoint::group_scale_name(module), DType::kBF16, {s.shape[0], q.groups(s.shape[1])},
                 std::move(scales));
      writer.add(checkpoint::weight_shape_name(module), DType::kI32, {2}, std::move(dims));
    } else if (model::is_stored_weight(s, StoredScheme::kFp8Block)) {
      const std::vector<uint8_t> f32 = make_tensor_bytes(s, o.seed, DType::kF32);
      const checkpoint::BlockQuant q{s.stored.block_rows, s.stored.block_cols, hp.quant_scale_ue8m0};
      auto [w8, scale] = checkpoint::quantize_fp8_blocks(reinterpret_cast<const float*>(f32.data()), s.shape[0],
                                                         s.shape[1], q);
      const Shape scale_shape = {(s.shape[0] + q.block_rows - 1) / q.block_rows,
                                 (s.shape[1] + q.block_cols - 1) / q.block_cols};
      // F32 scale_inv (DeepSeek-V3), or UE8M0 bytes 127 + log2(scale) (DeepSeek-V4's `.scale`).
      const DType scale_dtype = hp.quant_scale_ue8m0 ? DType::kF8_E8M0 : DType::kF32;
      std::vector<uint8_t> scale_bytes(scale.size() * dtype_size(scale_dtype));
      if (hp.quant_scale_ue8m0)
        for (size_t i = 0; i < scale.size(); ++i)
          scale_bytes[i] = static_cast<uint8_t>(127 + static_cast<int>(std::lround(std::log2(scale[i]))));
      else
        std::memcpy(scale_bytes.data(), scale.data(), scale_bytes.size());
      in_shard += w8.size() + scale_bytes.size();
      written += w8.size() + scale_bytes.size();
      weight_map[s.name] = weight_map[s.stored.scale] = shard_name(shard);
      writer.add(s.name, DType::kF8_E4M3, s.shape, std::move(w8));
      writer.add(s.stored.scale, scale_dtype, scale_shape, std::move(scale_bytes));
    } else if (s.index_range > 0) {
      // An index table [rows, k]: each row k distinct values of [0, index_range), seeded.
      DZ_CHECK(s.shape.size() == 2 && s.shape[1] <= s.index_range, s.name << ": index table shape");
      const int64_t rows = s.shape[0], k = s.shape[1];
      std::vector<int32_t> ids(static_cast<size_t>(rows * k));
      std::vector<int32_t> pool(static_cast<size_t>(s.index_range));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < s.index_range; ++j) pool[j] = static_cast<int32_t>(j);
        for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates from the seeded stream
          const float u = 0.5f * (synthetic_uniform(o.seed, s.name, static_cast<uint64_t>(r * k + j)) + 1.0f);
          const int64_t pick = j + std::min<int64_t>(s.index_range - j - 1, static_cast<int64_t>(u * (s.index_range - j)));
          std::swap(pool[j], pool[pick]);
          ids[r * k + j] = pool[j];
        }
      }
      std::vector<uint8_t> bytes(ids.size() * 4);
      std::memcpy(bytes.data(), ids.data(), bytes.size());
      in_shard += bytes.size();
      written += bytes.size();
      weight_map[s.name] = shard_name(shard);
      writer.add(s.name, DType::kI32, s.shape, std::move(bytes));
    } else {
      std::vector<uint8_t> bytes = make_tensor_bytes(s, o.seed, dense_dtype);
      in_shard += bytes.size();
      written += bytes.size();
      weight_map[s.name] = shard_name(shard);
      writer.add(s.name, dense_dtype, s.shape, std::move(bytes));
    }
    if (last || (in_shard >= per_shard && shard + 1 < o.shards)) DZ_RETURN_IF_ERROR(flush());
  }
  while (shard < o.shards) DZ_RETURN_IF_ERROR(flush());  // empty trailing shards keep the N-of-N names valid
  if (o.shards > 1) DZ_RETURN_IF_ERROR(checkpoint::write_index(out.string(), weight_map, written));
  return Status::Ok();
}

}  // namespace

Status read_make_model_yaml(const std::string& path, MakeModelOptions& o) {
  try {
    const YAML::Node y = YAML::LoadFile(path);
    for (const auto& kv : y) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "family") o.family = v.as<std::string>();
      else if (key == "n_vocab") o.shape.n_vocab = v.as<int64_t>();
      else if (key == "n_embd") o.shape.n_embd = v.as<int64_t>();
      else if (key == "n_layer") o.shape.n_layer = v.as<int64_t>();
      else if (key == "n_head") o.shape.n_head = v.as<int64_t>();
      else if (key == "n_head_kv") o.shape.n_head_kv = v.as<int64_t>();
      else if (key == "head_dim") o.shape.head_dim = v.as<int64_t>();
      else if (key == "n_ff") o.shape.n_ff = v.as<int64_t>();
      else if (key == "n_expert") o.shape.n_expert = v.as<int64_t>();
      else if (key == "n_expert_used") o.shape.n_expert_used = v.as<int64_t>();
      else if (key == "n_ff_expert") o.shape.n_ff_expert = v.as<int64_t>();
      else if (key == "max_position") o.shape.max_position = v.as<int64_t>();
      else if (key == "rope_theta") o.shape.rope_theta = v.as<double>();
      else if (key == "tie_embeddings") o.shape.tie_embeddings = v.as<bool>();
      else if (key == "shards") o.shards = v.as<int>();
      else if (key == "seed") o.seed = v.as<uint64_t>();
      else if (key == "tokenizer") o.tokenizer_dir = v.as<std::string>();
      else if (key == "dtype") {
        const std::string d = v.as<std::string>();
        if (d == "bfloat16" || d == "bf16") o.dtype = DType::kBF16;
        else if (d == "float32" || d == "f32") o.dtype = DType::kF32;
        else if (d == "float16" || d == "f16") o.dtype = DType::kF16;
        else if (d == "fp8") o.dtype = DType::kF8_E4M3;
        else if (d == "int4") o.dtype = DType::kBF16, o.shape.quant = "int4";
        else if (d == "mxfp4" || d == "nvfp4") o.dtype = DType::kBF16, o.fp4 = d;
        else return Status::InvalidArgument(path + ": dtype '" + d + "' is not bfloat16, float16, float32, fp8, int4, mxfp4 or nvfp4");
      } else {
        return Status::InvalidArgument(path + ": unknown key '" + key + "'");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace dayzero::tools
