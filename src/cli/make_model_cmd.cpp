// dayzero make-model: a seeded random checkpoint in the Hugging Face layout, or (--like --sparse)
// a real model's layout with holes for data (tools/make_model.h).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/registry.h"
#include "tools/make_model.h"

namespace dayzero::cli {

namespace {

// --like --sparse: every size, dtype and seed comes from the real config, so those flags are refused.
template <typename Args>
int make_sparse_like(Args& a, const CLI::App& cmd) {
  const auto fail = [](const std::string& m) {
    std::cerr << "dayzero make-model: " << m << std::endl;
    return 2;
  };
  if (!cmd.count("--like")) return fail("--sparse and --index need --like CONFIG_OR_DIR");
  if (!a.sparse) return fail("--like writes sparse checkpoints only (their bytes are holes): add --sparse");
  for (const char* flag : {"--config", "--family", "--n-vocab", "--n-embd", "--n-layer", "--n-head", "--n-head-kv",
                           "--head-dim", "--n-ff", "--n-expert", "--n-expert-used", "--n-ff-expert", "--tie-embeddings",
                           "--dtype", "--shards", "--seed", "--tokenizer"})
    if (cmd.count(flag)) return fail(std::string(flag) + " cannot be combined with --like: the real config decides");
  a.like.out_dir = a.o.out_dir;
  Status s = tools::make_sparse_like(a.like);
  if (!s.ok()) {
    std::cerr << "dayzero make-model: " << s.message() << std::endl;
    return s.exit_code();
  }
  std::cout << "wrote a sparse checkpoint like " << a.like.like << " to " << a.o.out_dir << std::endl;
  return 0;
}

}  // namespace

void add_make_model_command(CLI::App& app, Commands& commands) {
  struct Args {
    tools::MakeModelOptions o;
    std::string yaml, dtype = "bfloat16";
    tools::SparseLikeOptions like;
    bool sparse = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a seeded random checkpoint of a supported family");
  cmd->add_option("--out", a->o.out_dir, "Output folder")->required();
  cmd->add_option("--config", a->yaml, "YAML with sizes (flags given on the command line win)");
  std::string families;
  for (const std::string& f : model::supported_families()) families += (families.empty() ? "" : ", ") + f;
  cmd->add_option("--family,--arch", a->o.family, "Model family: " + families);
  cmd->add_option("--n-vocab", a->o.shape.n_vocab, "Vocabulary size (grown to cover the tokenizer)");
  cmd->add_option("--n-embd", a->o.shape.n_embd, "Hidden size");
  cmd->add_option("--n-layer", a->o.shape.n_layer, "Decoder layers");
  cmd->add_option("--n-head", a->o.shape.n_head, "Attention heads");
  cmd->add_option("--n-head-kv", a->o.shape.n_head_kv, "Key/value heads");
  cmd->add_option("--head-dim", a->o.shape.head_dim, "Head size (default n_embd / n_head)");
  cmd->add_option("--n-ff", a->o.shape.n_ff, "MLP intermediate size");
  cmd->add_option("--n-expert", a->o.shape.n_expert, "Routed experts per MoE layer (MoE families; default: the family's tiny default)");
  cmd->add_option("--n-expert-used", a->o.shape.n_expert_used, "Experts per token (MoE families)");
  cmd->add_option("--n-ff-expert", a->o.shape.n_ff_expert, "Intermediate size of one expert (qwen3_moe, deepseek_v3)");
  cmd->add_flag("--tie-embeddings", a->o.shape.tie_embeddings, "Share embedding and lm_head");
  cmd->add_option("--dtype", a->dtype, "bfloat16 (default), float16, float32, fp8 (block-quantized Linears), int4 (pack-quantized as the family ships it, rest bfloat16; families that support it), mxfp4 or nvfp4 (routed experts in compressed-tensors mxfp4- / nvfp4-pack-quantized, rest bfloat16; families with experts)");
  cmd->add_option("--shards", a->o.shards, "Number of safetensors shards (> 1 writes an index)");
  cmd->add_option("--seed", a->o.seed, "Seed of the weights");
  cmd->add_option("--tokenizer", a->o.tokenizer_dir, "Copy tokenizer.json from this folder (default: a small trained one)");
  cmd->add_option("--like", a->like.like,
                  "A real model's folder or config.json: write its exact tensor layout (needs --sparse)");
  cmd->add_option("--index", a->like.index_path,
                  "With --like: the real model.safetensors.index.json (same tensor-to-shard map and file names)");
  cmd->add_flag("--sparse", a->sparse, "With --like: leave every tensor's bytes a filesystem hole (reads as zeros)");
  cmd->callback([&commands, a, cmd] {
    commands.action = [a, cmd] {
      if (cmd->count("--like") || cmd->count("--sparse") || cmd->count("--index")) return make_sparse_like(*a, *cmd);
      tools::MakeModelOptions o = a->o;
      if (!a->yaml.empty()) {
        // YAML first, then the flags that were given explicitly.
        tools::MakeModelOptions from_yaml;
        from_yaml.out_dir = o.out_dir;
        Status s = tools::read_make_model_yaml(a->yaml, from_yaml);
        if (!s.ok()) {
          std::cerr << "dayzero make-model: " << s.message() << std::endl;
          return s.exit_code();
        }
        const auto given = [&](const char* name) { return cmd->count(name) > 0; };
        if (!given("--family")) o.family = from_yaml.family;
        if (!given("--n-vocab")) o.shape.n_vocab = from_yaml.shape.n_vocab;
        if (!given("--n-embd")) o.shape.n_embd = from_yaml.shape.n_embd;
        if (!given("--n-layer")) o.shape.n_layer = from_yaml.shape.n_layer;
        if (!given("--n-head")) o.shape.n_head = from_yaml.shape.n_head;
        if (!given("--n-head-kv")) o.shape.n_head_kv = from_yaml.shape.n_head_kv;
        if (!given("--head-dim")) o.shape.head_dim = from_yaml.shape.head_dim;
        if (!given("--n-ff")) o.shape.n_ff = from_yaml.shape.n_ff;
        if (!given("--n-expert")) o.shape.n_expert = from_yaml.shape.n_expert;
        if (!given("--n-expert-used")) o.shape.n_expert_used = from_yaml.shape.n_expert_used;
        if (!given("--n-ff-expert")) o.shape.n_ff_expert = from_yaml.shape.n_ff_expert;
        if (!given("--tie-embeddings")) o.shape.tie_embeddings = from_yaml.shape.tie_embeddings;
        if (!given("--shards")) o.shards = from_yaml.shards;
        if (!given("--seed")) o.seed = from_yaml.seed;
        if (!given("--tokenizer")) o.tokenizer_dir = from_yaml.tokenizer_dir;
        if (!given("--dtype")) o.dtype = from_yaml.dtype, o.shape.quant = from_yaml.shape.quant, o.fp4 = from_yaml.fp4;
        o.shape.max_position = from_yaml.shape.max_position;
        o.shape.rope_theta = from_yaml.shape.rope_theta;
      }
      if (cmd->count("--dtype") || a->yaml.empty()) {
        const std::string& d = a->dtype;
        if (d == "bfloat16" || d == "bf16") o.dtype = DType::kBF16;
        else if (d == "float32" || d == "f32") o.dtype = DType::kF32;
        else if (d == "float16" || d == "f16") o.dtype = DType::kF16;
        else if (d == "fp8") o.dtype = DType::kF8_E4M3;
        else if (d == "int4") o.dtype = DType::kBF16, o.shape.quant = "int4";
        else if (d == "mxfp4" || d == "nvfp4") o.dtype = DType::kBF16, o.fp4 = d;
        else {
          std::cerr << "dayzero make-model: --dtype " << d << " is not bfloat16, float16, float32, fp8, int4, mxfp4 or nvfp4"
                    << std::endl;
          return 2;
        }
      }
      Status s = tools::make_model(o);
      if (!s.ok()) {
        std::cerr << "dayzero make-model: " << s.message() << std::endl;
        return s.exit_code();
      }
      std::cout << "wrote " << o.family << " model to " << o.out_dir << std::endl;
      return 0;
    };
  });
}

}  // namespace dayzero::cli
