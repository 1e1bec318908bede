// What the analysis's figures rest on: the transformers defaults table fills what a config.json
// leaves out (and says so), a folder's own configuration_*.py wins over it (an unreadable
// default is named), a modeling_*.py importing an unknown kernel package is a "needs a new op"
// line, and an index whose total_size disagrees with the estimate is flagged with both figures.
// Each case has its negative control: the same input without the cause gives no such line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "analysis/analysis.h"

namespace dayzero::analysis {
namespace {
namespace fs = std::filesystem;

const std::string kConfigs = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("dayzero-sources-" + tag + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

bool any_contains(const std::vector<std::string>& lines, const std::string& a, const std::string& b = "") {
  for (const auto& l : lines)
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  return false;
}

// A small olmo2 config that leaves vocab_size, intermediate_size and the KV heads to the class.
nlohmann::json small_olmo2() {
  return {{"model_type", "olmo2"}, {"architectures", {"Olmo2ForCausalLM"}}, {"hidden_size", 256},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"torch_dtype", "bfloat16"}};
}

TEST(AnalysisSources, TableHoldsTransformersClassDefaults) {
  EXPECT_EQ(defaults_table_version(), "5.24.0");
  const nlohmann::json* g = table_entry("gemma2");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ((*g)["class"], "Gemma2Config");
  EXPECT_EQ((*g)["defaults"]["vocab_size"], 256000);
  EXPECT_EQ((*g)["defaults"]["tie_word_embeddings"], true);
  const nlohmann::json* l = table_entry("llama");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ((*l)["derived"]["head_dim"], "hidden_size // num_attention_heads");
  EXPECT_EQ((*l)["derived"]["num_key_value_heads"], "num_attention_heads");
  EXPECT_EQ((*table_entry("llava"))["sub_configs"]["text_config"], "llama");
  EXPECT_EQ((*table_entry("falcon"))["derived"]["ffn_hidden_size"], "hidden_size * 4");
  EXPECT_EQ(table_entry("no_such_family"), nullptr);
  EXPECT_EQ(eval_derived("hidden_size // num_attention_heads", {{"hidden_size", 4096}, {"num_attention_heads", 32}}), 128);
  EXPECT_EQ(eval_derived("hidden_size * 4", {{"hidden_size", 10}}), 40);
  EXPECT_FALSE(eval_derived("hidden_size // heads", {{"hidden_size", 10}}).has_value());
}

TEST(AnalysisSources, KeysTheConfigLeavesOutComeFromTheClass) {
  auto a = analyze(small_olmo2(), {}, Source::kConfig);
  ASSERT_TRUE(a.ok()) << a.status().message();
  const TextDims& t = a->dims.text;
  EXPECT_EQ(t.vocab, 50304);  // Olmo2Config's default
  EXPECT_EQ(t.ff, 11008);
  EXPECT_EQ(t.n_head_kv, 4);  // derived: num_key_value_heads = num_attention_heads
  EXPECT_EQ(a->dims.origins.at("vocab_size").from, KeyFrom::kTable);
  EXPECT_NE(a->dims.origins.at("vocab_size").detail.find("Olmo2Config"), std::string::npos);
  EXPECT_EQ(a->dims.origins.at("num_key_value_heads").from, KeyFrom::kDerived);
  EXPECT_EQ(a->dims.origins.at("hidden_size").from, KeyFrom::kConfig);
  EXPECT_EQ(a->basis.at("embedding").kind, "defaults");
  EXPECT_NE(a->basis.at("embedding").detail.find("vocab_size 50304 from transformers defaults"), std::string::npos)
      << a->basis.at("embedding").detail;
  EXPECT_EQ(a->basis.at("dense MLP").kind, "defaults");
  EXPECT_EQ(a->basis.at("attention projections").kind, "derived");
  EXPECT_EQ(a->parts.at("dense MLP"), 2 * 3 * 256 * 11008);
  // Control: the same keys written out are config keys and give the same counts.
  nlohmann::json full = small_olmo2();
  full["vocab_size"] = 50304, full["intermediate_size"] = 11008, full["num_key_value_heads"] = 4, full["head_dim"] = 64;
  full["tie_word_embeddings"] = false;
  auto b = analyze(full, {}, Source::kConfig);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->total, a->total);
  EXPECT_EQ(b->basis.at("embedding").kind, "config keys");
  EXPECT_EQ(b->basis.at("attention projections").kind, "config keys");
  // A class that ties by default (Gemma2Config) has no lm_head when the file says nothing ...
  nlohmann::json g = {{"model_type", "gemma2"}, {"hidden_size", 256}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"intermediate_size", 512}};
  auto tied = analyze(g, {}, Source::kConfig);
  ASSERT_TRUE(tied.ok());
  EXPECT_TRUE(tied->dims.text.tie_embeddings);
  EXPECT_EQ(tied->main.lm_head, 0);
  EXPECT_EQ(tied->dims.text.head_dim, 256);  // Gemma2Config's head_dim, not 256 / 4
  // ... and one when the file unties it.
  g["tie_word_embeddings"] = false;
  auto untied = analyze(g, {}, Source::kConfig);
  ASSERT_TRUE(untied.ok());
  EXPECT_EQ(untied->main.lm_head, 256000 * 256);
}

TEST(AnalysisSources, UnknownModelTypeIsGuessedAndSaysSo) {
  nlohmann::json c = small_olmo2();
  c["model_type"] = "brand_new_family";
  c["vocab_size"] = 1000;
  auto a = analyze(c, {}, Source::kConfig);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->dims.origins.at("num_key_value_heads").from, KeyFrom::kGuessed);
  EXPECT_EQ(a->basis.at("attention projections").kind, "guessed");
  EXPECT_TRUE(any_contains(a->risks, "brand_new_family", "neither transformers"));
  EXPECT_TRUE(any_contains(a->risks, "attention projections rests on a guess"));
  // Control: a model_type transformers knows raises neither line.
  auto k = analyze(small_olmo2(), {}, Source::kConfig);
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(any_contains(k->risks, "neither transformers"));
  EXPECT_FALSE(any_contains(k->risks, "rests on a guess"));
}

// llava-1.5's published text_config leaves LlamaConfig's sizes out (save_pretrained writes the
// difference): they come from the table, and the total still equals the index's bytes.
TEST(AnalysisSources, PublishedNestedConfigTakesItsClassDefaults) {
  auto l = analyze_path(kConfigs + "llava-1.5-7b-hf");
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->dims.text.hidden, 4096);
  EXPECT_EQ(l->dims.origins.at("hidden_size").from, KeyFrom::kTable);
  EXPECT_NE(l->dims.origins.at("hidden_size").detail.find("LlamaConfig"), std::string::npos);
  EXPECT_EQ(l->dims.origins.at("vocab_size").from, KeyFrom::kConfig);
  EXPECT_EQ(l->weight_bytes, l->index_total_size);
  EXPECT_EQ(l->basis.at("dense MLP").kind, "defaults");
  EXPECT_FALSE(any_contains(l->risks, "metadata.total_size")) << "the index agrees with the estimate";
}

TEST(AnalysisSources, PythonLiterals) {
  EXPECT_EQ(*python_literal("32000"), 32000);
  EXPECT_EQ(*python_literal("1_000"), 1000);
  EXPECT_EQ(*python_literal("0x10"), 16);
  EXPECT_EQ(*python_literal("1e-6"), 1e-6);
  EXPECT_EQ(*python_literal("-0.5"), -0.5);
  EXPECT_EQ(*python_literal("4096 * 32"), 131072);
  EXPECT_EQ(*python_literal("7 // 2"), 3);
  EXPECT_EQ(*python_literal("True"), true);
  EXPECT_TRUE(python_literal("None")->is_null());
  EXPECT_EQ(*python_literal("'silu'"), "silu");
  EXPECT_EQ(*python_literal("\"a\" 'b'"), "ab");
  EXPECT_EQ(*python_literal("[1, 2, (3, 4)]"), nlohmann::json::parse("[1,2,[3,4]]"));
  EXPECT_EQ(*python_literal("{'type': 'yarn', 'factor': 4.0}"), nlohmann::json::parse(R"({"type":"yarn","factor":4.0})"));
  for (const char* bad : {"int(4096)", "hidden // 2", "f'{x}'", "2 ** 10", "[1, x]", "", "'open"})
    EXPECT_FALSE(python_literal(bad).has_value()) << bad;
}

const char* kConfigurationX = R"PY(
# coding=utf-8
"""Olmo2X configuration.

class NotAClass: vocab_size = 1
"""
import os
from transformers.configuration_utils import PretrainedConfig


class Olmo2XConfig(PretrainedConfig):
    r"""Defaults differ from transformers' Olmo2Config on purpose."""

    model_type = "olmo2"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=1000,  # not Olmo2Config's 50304
        intermediate_size=2 * 384,
        num_key_value_heads=int(os.environ.get("KV", "2")),
        rope_scaling={"type": "linear",
                      "factor": 2.0},
        tie_word_embeddings=True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


class Olmo2XVisionConfig(PretrainedConfig):
    model_type = "olmo2x_vision"
    hidden_size: int = 7
    patch_size: int = compute_patch()


class Helper:  # neither model_type nor __init__: not a config class
    hidden_size = 9
)PY";

TEST(AnalysisSources, FolderConfigurationWinsOverTheTable) {
  const PyConfigFile f = parse_python_config(kConfigurationX, "configuration_olmo2x.py");
  ASSERT_EQ(f.classes.size(), 2u);
  const PyConfigClass& c = f.classes[0];
  EXPECT_EQ(c.name, "Olmo2XConfig");
  EXPECT_EQ(c.model_type, "olmo2");
  EXPECT_EQ(c.defaults["vocab_size"], 1000);
  EXPECT_EQ(c.defaults["intermediate_size"], 768);
  EXPECT_EQ(c.defaults["rope_scaling"]["factor"], 2.0);
  EXPECT_EQ(c.defaults["tie_word_embeddings"], true);
  ASSERT_EQ(c.unreadable.size(), 1u);
  EXPECT_EQ(c.unreadable[0], "num_key_value_heads = int(os.environ.get(\"KV\", \"2\"))");
  EXPECT_EQ(f.classes[1].model_type, "olmo2x_vision");  // dataclass style: class attributes
  EXPECT_EQ(f.classes[1].defaults["hidden_size"], 7);
  EXPECT_EQ(f.classes[1].unreadable, (std::vector<std::string>{"patch_size = compute_patch()"}));

  TempDir dir("folder-config");
  dir.write("config.json", small_olmo2().dump());
  auto without = analyze_path(dir.path.string());  // control: transformers' Olmo2Config
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_EQ(without->dims.text.vocab, 50304);
  EXPECT_FALSE(without->dims.text.tie_embeddings);
  dir.write("configuration_olmo2x.py", kConfigurationX);
  auto with = analyze_path(dir.path.string());
  ASSERT_TRUE(with.ok()) << with.status().message();
  EXPECT_EQ(with->dims.text.vocab, 1000);
  EXPECT_EQ(with->dims.text.ff, 768);
  EXPECT_TRUE(with->dims.text.tie_embeddings);
  EXPECT_EQ(with->main.lm_head, 0);
  EXPECT_EQ(with->dims.origins.at("vocab_size").from, KeyFrom::kFolderCode);
  EXPECT_EQ(with->dims.origins.at("vocab_size").detail, "configuration_olmo2x.py Olmo2XConfig");
  EXPECT_NE(with->basis.at("embedding").detail.find("folder defaults (configuration_olmo2x.py Olmo2XConfig)"),
            std::string::npos)
      << with->basis.at("embedding").detail;
  // The unreadable default is named; the table's derived rule stands in for it.
  EXPECT_TRUE(any_contains(with->risks, "configuration_olmo2x.py Olmo2XConfig: default not read (num_key_value_heads"));
  EXPECT_FALSE(any_contains(without->risks, "default not read"));
  EXPECT_EQ(with->dims.text.n_head_kv, 4);
  // A config.json given alone reads the code beside it too.
  auto file = analyze_path((dir.path / "config.json").string());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->dims.text.vocab, 1000);
}

const char* kModelingX = R"PY(
"""Mentions of a sliding window in a docstring are not code."""
import math
import torch
from torch import nn
from .configuration_olmo2x import Olmo2XConfig
import my_fused_kernels
try:
    import triton
except ImportError:
    triton = None


class Olmo2XAttention(nn.Module):
    def forward(self, x):
        y = torch.ops.xkern.rms_norm(x)
        z = torch.ops.aten.add(y, y)
        return torch.tanh(z / self.config.attn_logit_softcapping)
)PY";

TEST(AnalysisSources, ModelingCodeNeedingNewOpsIsNamed) {
  const ModelingScan s = scan_modeling(kModelingX, "modeling_olmo2x.py");
  EXPECT_EQ(s.imports, (std::vector<std::string>{"math", "torch", ".", "my_fused_kernels", "triton"}));
  EXPECT_EQ(s.classes, (std::vector<std::string>{"Olmo2XAttention"}));
  std::map<std::string, const CodeFinding*> by;
  for (const auto& f : s.findings) by[f.name] = &f;
  ASSERT_TRUE(by.count("import my_fused_kernels"));
  EXPECT_FALSE(by["import my_fused_kernels"]->supported);
  EXPECT_NE(by["import my_fused_kernels"]->block.find("needs a new op: unknown package 'my_fused_kernels'"), std::string::npos);
  ASSERT_TRUE(by.count("import triton"));
  EXPECT_NE(by["import triton"]->evidence.find("may be optional"), std::string::npos);
  ASSERT_TRUE(by.count("torch.ops.xkern.rms_norm"));
  EXPECT_FALSE(by["torch.ops.xkern.rms_norm"]->supported);
  ASSERT_TRUE(by.count("torch.ops.aten.add"));
  EXPECT_TRUE(by["torch.ops.aten.add"]->supported);
  EXPECT_TRUE(by.count("soft-capping"));
  EXPECT_FALSE(by.count("sliding window")) << "a docstring is not code";

  TempDir dir("modeling");
  nlohmann::json c = small_olmo2();
  c["transformers_version"] = "4.57.1";
  c["auto_map"] = {{"AutoConfig", "configuration_olmo2x.Olmo2XConfig"}, {"AutoModelForCausalLM", "modeling_olmo2x.Olmo2XForCausalLM"}};
  dir.write("config.json", c.dump());
  dir.write("modeling_olmo2x.py", "import torch\nimport math\n");  // control: plain PyTorch
  auto plain = analyze_path(dir.path.string());
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(any_contains(plain->risks, "needs a new op"));
  EXPECT_EQ(plain->transformers_version, "4.57.1");
  EXPECT_EQ(plain->auto_map.size(), 2u);
  EXPECT_TRUE(any_contains(plain->risks, "configuration_olmo2x.py, which is not in the folder"));
  EXPECT_FALSE(any_contains(plain->risks, "modeling_olmo2x.py, which is not in the folder"));
  dir.write("modeling_olmo2x.py", kModelingX);
  auto a = analyze_path(dir.path.string());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(any_contains(a->risks, "import my_fused_kernels", "needs a new op"));
  EXPECT_TRUE(any_contains(a->risks, "torch.ops.xkern.rms_norm", "needs a new op"));
  bool feature = false;
  for (const auto& f : a->features) feature = feature || (f.name == "import my_fused_kernels" && f.status == FeatureStatus::kNewBlock);
  EXPECT_TRUE(feature);
  // A config newer than the table is a register line; an older one is not.
  c["transformers_version"] = "6.1.0";
  dir.write("config.json", c.dump());
  auto newer = analyze_path(dir.path.string());
  ASSERT_TRUE(newer.ok());
  EXPECT_TRUE(any_contains(newer->risks, "transformers 6.1.0, newer than the defaults table (5.24.0)"));
  EXPECT_FALSE(any_contains(a->risks, "newer than the defaults table"));
}

// An index listing exactly the estimate's tensors, with total_size as given.
void write_index(const TempDir& dir, const nlohmann::json& config, double scale, const std::string& extra = "") {
  auto est = analyze(config, {}, Source::kConfig);
  ASSERT_TRUE(est.ok());
  nlohmann::json map = nlohmann::json::object();
  for (const auto& t : est->tensors) map[t.name] = "model-00001-of-00001.safetensors";
  if (!extra.empty()) map[extra] = "model-00001-of-00001.safetensors";
  const auto total = static_cast<uint64_t>(static_cast<double>(est->weight_bytes) * scale);
  dir.write("model.safetensors.index.json",
            nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump());
}

TEST(AnalysisSources, IndexDisagreeingWithTheEstimateIsFlagged) {
  nlohmann::json c = small_olmo2();
  c["vocab_size"] = 1000;
  c["num_key_value_heads"] = 2;  // GQA, which a proof covers: the control's register is empty
  auto est = analyze(c, {}, Source::kConfig);
  ASSERT_TRUE(est.ok());
  const std::string bytes = model::grouped_count(static_cast<int64_t>(est->weight_bytes));
  const std::string bigger = model::grouped_count(static_cast<int64_t>(static_cast<double>(est->weight_bytes) * 1.10));
  TempDir dir("index");
  dir.write("config.json", c.dump());
  write_index(dir, c, 1.0);  // control: the index says what the config says
  auto same = analyze_path(dir.path.string());
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_EQ(same->source, Source::kIndexNames);
  EXPECT_EQ(same->weight_bytes, est->weight_bytes);
  EXPECT_TRUE(same->risks.empty()) << same->risks.front();
  EXPECT_EQ(same->basis.at("embedding").kind, "index");
  write_index(dir, c, 1.10);
  auto off = analyze_path(dir.path.string());
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_TRUE(any_contains(off->risks, "metadata.total_size " + bigger + " bytes", bytes + " bytes (+10.0 %)"))
      << (off->risks.empty() ? "no risk" : off->risks.front());
  write_index(dir, c, 1.01);  // under 2 %: not flagged
  auto near = analyze_path(dir.path.string());
  ASSERT_TRUE(near.ok());
  EXPECT_FALSE(any_contains(near->risks, "metadata.total_size"));
  // A tensor group the estimate does not have is named.
  write_index(dir, c, 1.0, "model.layers.0.mlp.gate_proj.lora_A.weight");
  auto extra = analyze_path(dir.path.string());
  ASSERT_TRUE(extra.ok());
  EXPECT_TRUE(any_contains(extra->risks, "dense MLP: the index's names give", "groups the estimate does not have: model.layers.{L}.mlp.gate_proj.lora_A.weight"))
      << extra->risks.back();
  EXPECT_FALSE(any_contains(same->risks, "dense MLP"));
  // Published: WizardLM-2's index names its experts as Mixtral does (block_sparse_moe.w1), the
  // estimate as mlp.experts.gate_proj; the parts agree, so no line.
  auto w = analyze_path(kConfigs + "WizardLM-2-8x22B");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->risks.empty()) << w->risks.front();
}

}  // namespace
}  // namespace dayzero::analysis
