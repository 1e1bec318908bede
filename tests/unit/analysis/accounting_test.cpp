// analysis/ keys.h, evidence.h, modeling_scan.h: every key of every fixture config is understood,
// irrelevant or unrecognised, and a made-up key is unrecognised with its value; enum values the
// analysis does not know (sqrtsoftplus, a layer kind) are risks and never supported; Kimi Delta
// Attention is not Gated DeltaNet; DeepSeek-V4's modeling file has its new modules unmatched with
// their lines; fingerprints match computations, not names; every proof names a registered adapter
// and a test that exists.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis/analysis.h"
#include "analysis/evidence.h"
#include "model/registry.h"

namespace dayzero::analysis {
namespace {
namespace fs = std::filesystem;

const std::string kConfigs = std::string(DAYZERO_FIXTURES_DIR) + "/configs/";
const std::string kModeling = std::string(DAYZERO_FIXTURES_DIR) + "/modeling/";

nlohmann::json load(const std::string& name) {
  std::ifstream f(kConfigs + name + "/config.json");
  return nlohmann::json::parse(f);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("dayzero-accounting-" + tag + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

const Finding* feature(const Analysis& a, const std::string& name) {
  for (const auto& f : a.features)
    if (f.name == name) return &f;
  return nullptr;
}

const KeyAccount* key(const Analysis& a, const std::string& k) {
  for (const auto& x : a.keys)
    if (x.key == k) return &x;
  return nullptr;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& a, const std::string& b = "") {
  for (const auto& l : lines)
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  return false;
}

// The keys a config holds: its sections' keys, and those of rope_scaling / rope_parameters.
std::vector<std::string> config_keys(const nlohmann::json& c) {
  std::vector<std::string> out;
  const auto section = [&](const nlohmann::json& s, const std::string& prefix) {
    for (const auto& [k, v] : s.items()) {
      out.push_back(prefix + k);
      if ((k == "rope_scaling" || k == "rope_parameters") && v.is_object())
        for (const auto& [rk, rv] : v.items()) out.push_back(prefix + k + "." + rk);
    }
  };
  section(c, "");
  for (const char* sub : {"text_config", "vision_config"})
    if (c.contains(sub) && c[sub].is_object()) section(c[sub], std::string(sub) + ".");
  return out;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kConfigs))
    if (fs::exists(e.path() / "config.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Accounting, EveryKeyOfEveryFixtureConfigHasAHeading) {
  const std::vector<std::string> names = fixture_names();
  ASSERT_GE(names.size(), 27u);  // the 25 published configs, DeepSeek-V4-Flash and Kimi-Linear
  for (const char* must : {"DeepSeek-V4-Flash", "Kimi-Linear"})
    EXPECT_NE(std::find(names.begin(), names.end(), must), names.end()) << must;
  for (const std::string& name : names) {
    const nlohmann::json c = load(name);
    auto a = analyze(c, {}, Source::kConfig);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().message();
    const std::vector<std::string> keys = config_keys(c);
    EXPECT_EQ(a->keys.size(), keys.size()) << name;
    for (const std::string& k : keys) {
      const KeyAccount* x = key(*a, k);
      ASSERT_NE(x, nullptr) << name << ": key " << k << " has no heading";
      EXPECT_FALSE(x->what.empty()) << name << ": " << k;
      if (x->cls == KeyClass::kUnrecognised) {
        EXPECT_TRUE(any_contains(a->risks, "unrecognised config key " + k + " = ")) << name << ": " << k;
      }
    }
  }
}

TEST(Accounting, AMadeUpKeyIsUnrecognisedWithItsValue) {
  for (const std::string& name : fixture_names()) {
    nlohmann::json c = load(name);
    c["zz_made_up_key"] = 12345;
    std::vector<std::string> where = {"zz_made_up_key"};
    for (const char* sub : {"text_config", "vision_config"})
      if (c.contains(sub) && c[sub].is_object()) {
        c[sub]["zz_made_up_key"] = "on";
        where.push_back(std::string(sub) + ".zz_made_up_key");
      }
    auto a = analyze(c, {}, Source::kConfig);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().message();
    for (const std::string& k : where) {
      const KeyAccount* x = key(*a, k);
      ASSERT_NE(x, nullptr) << name << ": " << k;
      EXPECT_EQ(x->cls, KeyClass::kUnrecognised) << name << ": " << k;
      const std::string value = k == "zz_made_up_key" ? "12345" : "\"on\"";
      EXPECT_EQ(x->value, value) << name << ": " << k;
      EXPECT_TRUE(any_contains(a->risks, "unrecognised config key " + k + " = " + value)) << name << ": " << k;
    }
    // The control: without the key, nothing of that name is in the register.
    auto plain = analyze(load(name), {}, Source::kConfig);
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(any_contains(plain->risks, "zz_made_up_key")) << name;
  }
}

// DeepSeek-V4's features are supported where the deepseek_v4 adapter runs them, and, for a
// model no adapter claims, only through the proofs naming its golden test (evidence.cpp); a
// config the adapter refuses is claimed by none. Unknown layer kinds are never supported.
TEST(Accounting, DeepseekV4FeaturesAreSupportedOnlyWhereATestRunsThem) {
  const char* const kV4Features[] = {"MoE routing (scoring_func sqrtsoftplus)", "compressed sparse attention",
                                     "heavily compressed attention", "hash routing", "hyper-connections",
                                     "shared-KV attention (DeepSeek-V4)", "compressed KV attention",
                                     "grouped output projection", "clamped SwiGLU", "sliding window"};
  auto v4 = analyze(load("DeepSeek-V4-Flash"), {}, Source::kConfig);
  ASSERT_TRUE(v4.ok()) << v4.status().message();
  EXPECT_EQ(v4->adapter, "deepseek_v4");
  ASSERT_NE(key(*v4, "scoring_func"), nullptr);
  EXPECT_EQ(key(*v4, "scoring_func")->cls, KeyClass::kUnderstood);
  ASSERT_NE(key(*v4, "layer_types"), nullptr);
  EXPECT_EQ(key(*v4, "layer_types")->cls, KeyClass::kUnderstood);
  EXPECT_EQ(feature(*v4, "MoE softmax routing"), nullptr);
  EXPECT_EQ(feature(*v4, "MQA"), nullptr);  // one shared KV head, but not the MQA a proof covers
  for (const char* name : kV4Features) {
    ASSERT_NE(feature(*v4, name), nullptr) << name;
    EXPECT_EQ(feature(*v4, name)->status, FeatureStatus::kAdapter) << name;
  }
  // No adapter claims a renamed architecture: the proofs name the golden test.
  nlohmann::json renamed = load("DeepSeek-V4-Flash");
  renamed["model_type"] = "deepseek_v4_next";
  renamed["architectures"] = {"DeepseekV4NextForCausalLM"};
  auto r = analyze(renamed, {}, Source::kConfig);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->adapter.empty());
  for (const char* name : kV4Features) {
    ASSERT_NE(feature(*r, name), nullptr) << name;
    EXPECT_EQ(feature(*r, name)->status, FeatureStatus::kBlock) << name;
    EXPECT_NE(feature(*r, name)->proof.find("deepseek_v4_golden_test.cpp"), std::string::npos) << name;
  }
  // The control: a config the adapter refuses (an activation it does not run) is claimed by no
  // adapter, so nothing is "supported by adapter".
  nlohmann::json refused = load("DeepSeek-V4-Flash");
  refused["hidden_act"] = "relu";
  auto p = analyze(refused, {}, Source::kConfig);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->adapter.empty());
  for (const auto& f : p->features) EXPECT_NE(f.status, FeatureStatus::kAdapter) << f.name;
  EXPECT_NE(feature(*v4, "compressed sparse attention")->detail.find("20 of 43"), std::string::npos);
  EXPECT_NE(feature(*v4, "heavily compressed attention")->detail.find("23 of 43"), std::string::npos);
  // Every layer kind counted: transformers 5.25.0 builds DeepseekV4ForCausalLM of this config on
  // the meta device with 284,325,869,015 parameters (no MTP layer), each part as here: hash layers
  // are MoE layers, the compressors and indexers, hyper-connections and grouped output included.
  EXPECT_EQ(v4->n_moe_layers, 43);
  EXPECT_EQ(v4->total, 284325869015);
  EXPECT_EQ(v4->parts.at("hyper-connections"), 34670925);
  EXPECT_EQ(v4->parts.at("KV compressor"), 265852416);
  EXPECT_EQ(v4->unknown_tensors, 0);
  EXPECT_TRUE(any_contains(v4->notes, "the parameter estimate leaves out", "token-id tables"));
  EXPECT_FALSE(any_contains(v4->notes, "the parameter estimate leaves out", "hyper-connections"));
  EXPECT_NE(r->closest.find("closest: deepseek_v4 (runs "), std::string::npos) << r->closest;
  EXPECT_NE(r->closest.find("hyper-connections"), std::string::npos) << r->closest;

  // The controls: a known score function is understood and proven; a made-up layer kind in a
  // hybrid config, or in DeepSeek-V4's, is unrecognised and named.
  nlohmann::json odd = renamed;
  odd["layer_types"][5] = "zz_attention";
  auto o = analyze(odd, {}, Source::kConfig);
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(key(*o, "layer_types")->cls, KeyClass::kUnrecognised);
  ASSERT_NE(feature(*o, "layer kind 'zz_attention'"), nullptr);
  EXPECT_EQ(feature(*o, "layer kind 'zz_attention'")->status, FeatureStatus::kReview);
  nlohmann::json sigmoid = renamed;
  sigmoid["scoring_func"] = "sigmoid";
  auto s = analyze(sigmoid, {}, Source::kConfig);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(key(*s, "scoring_func")->cls, KeyClass::kUnderstood);
  ASSERT_NE(feature(*s, "MoE sigmoid routing"), nullptr);
  EXPECT_EQ(feature(*s, "MoE sigmoid routing")->status, FeatureStatus::kBlock);
  nlohmann::json hybrid = load("Qwen3.5-397B-A17B");
  hybrid["model_type"] = "qwen3_5_moe_unknown";
  hybrid["architectures"] = {"Unknown"};
  hybrid["text_config"]["layer_types"][0] = "zz_attention";
  auto h = analyze(hybrid, {}, Source::kConfig);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(key(*h, "text_config.layer_types")->cls, KeyClass::kUnrecognised);
  ASSERT_NE(feature(*h, "layer kind 'zz_attention'"), nullptr);
  EXPECT_EQ(feature(*h, "layer kind 'zz_attention'")->status, FeatureStatus::kReview);
  EXPECT_TRUE(any_contains(h->risks, "unrecognised config key text_config.layer_types", "'zz_attention'"));
}

TEST(Accounting, KimiDeltaAttentionIsNotGatedDeltaNet) {
  auto k = analyze(load("Kimi-Linear"), {}, Source::kConfig);
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(feature(*k, "linear attention (Gated DeltaNet)"), nullptr);
  const Finding* kda = feature(*k, "linear attention (Kimi Delta Attention)");
  ASSERT_NE(kda, nullptr);
  EXPECT_EQ(kda->status, FeatureStatus::kReview);
  EXPECT_NE(kda->detail.find("21 of 27 layers"), std::string::npos) << kda->detail;
  for (const auto& f : k->features)
    if (f.status == FeatureStatus::kBlock) {
      EXPECT_EQ(f.name.find("linear"), std::string::npos) << f.name;
      EXPECT_EQ(f.block.find("gated_deltanet"), std::string::npos) << f.name;
    }
  // No scoring_func in the file or its class: the router's score function is not read as softmax.
  EXPECT_EQ(feature(*k, "MoE softmax routing"), nullptr);
  ASSERT_NE(feature(*k, "MoE routing (score function not stated)"), nullptr);
  // mlp_layer_types: layer 0 dense, 26 MoE; the shared expert (num_shared_experts) and the KDA
  // layers counted: transformers 5.25.0 builds KimiLinearForCausalLM of this config on the meta
  // device with 49,133,074,464 parameters.
  EXPECT_EQ(k->n_moe_layers, 26);
  EXPECT_GT(k->main.shared_experts, 0);
  EXPECT_EQ(k->total, 49133074464);
  EXPECT_EQ(k->parts.at("linear attention"), 829797024);
  EXPECT_EQ(k->unknown_tensors, 0);
  EXPECT_FALSE(any_contains(k->notes, "the parameter estimate leaves out"));
  // Its KDA layers keep a recurrent state (32 heads of 128 x 128), not a KV cache.
  int64_t kda_layers = 0;
  for (const auto& l : describe_layers(k->dims.text))
    if (l.mixer == model::MixerKind::kLinearAttention) {
      kda_layers += 1;
      EXPECT_EQ(l.cache.state_heads, 32);
      EXPECT_EQ(l.cache.k_dim, 128);
      EXPECT_EQ(l.cache.kv_heads, 0);
    }
  EXPECT_EQ(kda_layers, 21);
}

bool has_module(const Analysis& a, const std::string& name, int line, bool matched) {
  for (const auto& m : a.modeling)
    for (const auto& x : m.modules)
      if (x.name == name && x.line == line) return x.block.empty() != matched;
  return false;
}

TEST(Accounting, DeepSeekV4ModelingFileNamesItsNewModulesWithLines) {
  TempDir dir("v4");
  fs::copy_file(kConfigs + "DeepSeek-V4-Flash/config.json", dir.path / "config.json");
  fs::copy_file(kModeling + "deepseek_v4/modeling_deepseek_v4.py", dir.path / "modeling_deepseek_v4.py");
  auto beside = analyze_path(dir.path.string());
  ASSERT_TRUE(beside.ok()) << beside.status().message();
  auto given = analyze_path(kConfigs + "DeepSeek-V4-Flash", nullptr, kModeling + "deepseek_v4");
  ASSERT_TRUE(given.ok()) << given.status().message();
  for (const Analysis* a : {&*beside, &*given}) {
    ASSERT_EQ(a->modeling.size(), 1u);
    // The lines of transformers 5.25.0's modeling_deepseek_v4.py.
    const std::vector<std::pair<const char*, int>> unmatched = {
        {"DeepseekV4GroupedLinear", 313},    {"DeepseekV4HCACompressor", 372}, {"DeepseekV4CSACompressor", 599},
        {"DeepseekV4Attention", 764},        {"DeepseekV4HyperConnection", 884}, {"DeepseekV4HyperHead", 998},
        {"DeepseekV4MLP", 1017},             {"DeepseekV4TopKRouter", 1076},   {"DeepseekV4HashRouter", 1097},
        {"DeepseekV4DecoderLayer", 1148},    {"rotate_half", 345},             {"eager_attention_forward", 726}};
    for (const auto& [name, line] : unmatched) {
      EXPECT_TRUE(has_module(*a, name, line, false)) << name << ":" << line;
      EXPECT_TRUE(any_contains(a->risks, std::string("modeling_deepseek_v4.py:") + std::to_string(line) + " " + name,
                               "no dayzero block is matched to it by its computation")) << name;
    }
    EXPECT_TRUE(has_module(*a, "DeepseekV4RMSNorm", 45, true));
    EXPECT_TRUE(has_module(*a, "repeat_kv", 714, true));
    // The deepseek_v4 adapter runs the config (its golden test): the features are supported by it
    // while the scan, which matches by computation, leaves V4's own modules unmatched.
    for (const char* name : {"hyper-connections", "compressed KV attention", "hash routing", "grouped output projection",
                             "MoE routing (scoring_func sqrtsoftplus)", "compressed sparse attention",
                             "heavily compressed attention"})
      EXPECT_FALSE(any_contains(a->risks, std::string("needs review: ") + name)) << name;
    for (const char* hint : {"hyper-connections", "compressed sparse attention", "heavily compressed attention", "hash routing",
                             "grouped output projection"})
      EXPECT_TRUE(any_contains(a->risks, "its name suggests " + std::string(hint))) << hint;
  }
  // A path that is not there is bad input naming it.
  auto missing = analyze_path(kConfigs + "DeepSeek-V4-Flash", nullptr, kModeling + "no_such_family");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_family"), std::string::npos);
}

TEST(Accounting, FingerprintsMatchComputationsNotNames) {
  const std::string src = R"(
import torch
from torch import nn

class LlamaRMSNorm(nn.Module):
    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states

class FancyRMSNorm(nn.Module):
    def forward(self, x):
        return x * torch.tanh(self.weight)

class PlainMLP(nn.Module):
    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

class ClampedMLP(nn.Module):
    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x).clamp(max=7.0)) * self.up_proj(x))

class SomeCache:
    def update(self, k):
        return k

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)

def never_used(x):
    return x

class UsesRotate(PlainMLP):
    def forward(self, x):
        return rotate_half(x)
)";
  const std::vector<ModuleAccount> m = account_modules(src);
  std::map<std::string, const ModuleAccount*> by;
  for (const auto& x : m) by[x.name] = &x;
  ASSERT_TRUE(by.count("LlamaRMSNorm"));
  EXPECT_EQ(by["LlamaRMSNorm"]->block, "blocks/norm");
  EXPECT_EQ(by["LlamaRMSNorm"]->line, 5);
  ASSERT_TRUE(by.count("FancyRMSNorm"));
  EXPECT_TRUE(by["FancyRMSNorm"]->block.empty());
  EXPECT_EQ(by["FancyRMSNorm"]->hint, "a norm");  // evidence for a reader, not a match
  EXPECT_EQ(by["PlainMLP"]->block, "blocks/mlp");
  ASSERT_TRUE(by.count("ClampedMLP"));
  EXPECT_TRUE(by["ClampedMLP"]->block.empty());
  EXPECT_FALSE(by.count("SomeCache"));   // not a module
  EXPECT_FALSE(by.count("never_used"));  // no forward uses it
  ASSERT_TRUE(by.count("rotate_half"));  // UsesRotate's forward does (a subclass of a module of the file)
  EXPECT_EQ(by["rotate_half"]->block, "blocks/attention");
  EXPECT_TRUE(by.count("UsesRotate"));
  // A class far longer than any module's code is named unmatched, not matched (and no regex runs
  // over it): a long body and a long identifier.
  std::string big = "class Huge(nn.Module):\n    def forward(self, x):\n";
  for (int i = 0; i < 20000; ++i) big += "        x = x + 1\n";
  big += "        return " + std::string(100000, 'a') + "\n";
  const std::vector<ModuleAccount> h = account_modules(big);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_TRUE(h[0].block.empty());
  EXPECT_NE(h[0].how.find("characters of code"), std::string::npos) << h[0].how;
}

TEST(Accounting, EveryProofNamesARegisteredAdapterAndATestThatExists) {
  const std::vector<std::string> families = model::supported_families();
  ASSERT_FALSE(proofs().empty());
  for (const Proof& p : proofs()) {
    EXPECT_NE(std::find(families.begin(), families.end(), p.adapter), families.end()) << p.feature << ": " << p.adapter;
    const std::string test = p.test;
    const size_t space = test.find(' ');
    ASSERT_NE(space, std::string::npos) << test;
    const std::string file = std::string(DAYZERO_SOURCE_DIR) + "/" + test.substr(0, space);
    ASSERT_TRUE(fs::exists(file)) << file;
    const std::string text = slurp(file), name = test.substr(space + 1);
    if (const size_t slash = name.rfind('/'); slash != std::string::npos) {  // a parameterised suite's value
      EXPECT_NE(text.find("\"" + name.substr(slash + 1) + "\""), std::string::npos) << test;
    } else {
      const size_t dot = name.find('.');
      ASSERT_NE(dot, std::string::npos) << test;
      EXPECT_NE(text.find("TEST(" + name.substr(0, dot) + ", " + name.substr(dot + 1) + ")"), std::string::npos) << test;
    }
  }
  EXPECT_EQ(closest_families({"zz unknown"}), "");
  EXPECT_EQ(closest_families({"MLA", "MoE sigmoid routing", "zz unknown"}),
            "closest: deepseek_v3 (runs MLA, MoE sigmoid routing), deepseek_v32 (runs MLA, MoE sigmoid routing), "
            "glm_moe_dsa (runs MLA, MoE sigmoid routing); differs in: zz unknown");
}

}  // namespace
}  // namespace dayzero::analysis
