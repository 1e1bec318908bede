// Seeded random checkpoints in the real Hugging Face layout (config.json, safetensors with an
// optional index, tokenizer files, generation_config.json) for any registered family: what
// the quickstart and the tests run on. Values are drawn from a counter-based generator keyed
// by (seed, tensor name) with no transcendental functions, so the same seed gives the same
// bytes on every machine and in any tensor order. Tooling (dz_tools): a run never links it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "model/adapter.h"

namespace dayzero::tools {

struct MakeModelOptions {
  std::string family = "llama";
  std::string out_dir;
  model::ModelShape shape;  // sizes left 0 that the family needs get its tiny defaults
  uint64_t seed = 1234;
  DType dtype = DType::kBF16;  // BF16 (default), F16, F32, or F8_E4M3 (block-quantized Linears, rest BF16)
  int shards = 1;              // > 1 writes model-0000i-of-0000N.safetensors + index
  std::string tokenizer_dir;   // copy tokenizer.json (+ tokenizer_config.json) from here; empty = train a small one
  std::string fp4;             // "mxfp4" or "nvfp4": routed experts in that format (compressed-tensors), rest dtype
  // Keys set over the adapter's generated config.json before the tensor list is derived from
  // it (a null value is written as null, e.g. q_lora_rank), for variants a shape cannot say.
  nlohmann::json config_overrides = nlohmann::json::object();
};

// Writes the checkpoint; the model's n_vocab grows to cover the tokenizer when needed.
Status make_model(const MakeModelOptions& options);

// A checkpoint with the exact tensor names, shapes, dtypes (FP8 and its block scales where
// config.json's quantization_config says so) of a real model, from its config.json and the
// family's adapter, with every data region a filesystem hole (checkpoint/writer.h): terabytes
// apparent, kilobytes on disk. With the real index.json the tensors go to the same shard
// files (and the index is copied); without one they are packed in spec order into shards of
// at most max_shard_bytes named like Hugging Face's. config.json (and generation_config.json,
// tokenizer.json, tokenizer_config.json when next to it) are copied byte for byte.
struct SparseLikeOptions {
  std::string like;        // a model folder holding config.json, or a config.json
  std::string index_path;  // model.safetensors.index.json of the real model; empty: none
  std::string out_dir;
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size "5GB"
};

// Errors (bad input, exit 2), each naming the file: no config.json, an architecture without
// an adapter, a torch_dtype that is no safetensors dtype, an index whose tensors differ from
// the adapter's (the first missing and unknown names), whose shard names are not plain
// .safetensors file names, or whose metadata.total_size differs from the tensors' bytes.
Status make_sparse_like(const SparseLikeOptions& options);

// Writes a model folder at out_dir through write(folder): into a sibling folder renamed over
// out_dir at the end, so a failure leaves nothing behind. An existing out_dir is replaced only
// when it is empty or a model folder (holds config.json).
Status write_model_folder(const std::string& out_dir, const std::function<Status(const std::filesystem::path&)>& write);

// Reads sizes from a small YAML file ({family, n_vocab, n_embd, n_layer, n_head, n_head_kv,
// head_dim, n_ff, tie_embeddings, rope_theta, dtype, shards, seed}) into options.
Status read_make_model_yaml(const std::string& path, MakeModelOptions& options);

// The uniform value in [-1, 1) that the generator gives element i of tensor `name`.
float synthetic_uniform(uint64_t seed, const std::string& name, uint64_t i);

}  // namespace dayzero::tools
