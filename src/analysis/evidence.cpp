// The proof table (evidence.h). Each entry: a feature key, the block, the adapter that runs it and
// the test that compares that adapter, on a tiny model with the feature, against transformers
// (tests/data/golden/<family>.yaml says which features each tiny model has). A new adapter that
// runs a new feature under a test adds one line here; nothing else marks a feature supported.
#include "analysis/evidence.h"

#include <algorithm>
#include <map>
#include <set>

namespace dayzero::analysis {
namespace {

#define HF_GOLDEN(family) "tests/e2e/hf_golden_test.cpp Families/HfGolden.MatchesTransformers/" family
#define V4_GOLDEN "tests/e2e/deepseek_v4_golden_test.cpp DeepseekV4Golden.PrefillAndCachedDecodeMatchTransformers"

const std::vector<Proof> kProofs = {
    // attention
    {"GQA", "blocks/attention", "llama", HF_GOLDEN("llama")},  // 4 q / 2 kv heads
    {"MQA", "blocks/attention", "qwen2", HF_GOLDEN("qwen2")},  // 4 q / 1 kv head
    {"MLA", "blocks/mla", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"MLA", "blocks/mla", "deepseek_v32", HF_GOLDEN("deepseek_v32")},
    {"MLA", "blocks/mla", "glm_moe_dsa", HF_GOLDEN("glm_moe_dsa")},
    {"sparse attention indexer (DSA)", "blocks/dsa_indexer", "deepseek_v32", HF_GOLDEN("deepseek_v32")},
    {"sparse attention indexer (DSA)", "blocks/dsa_indexer", "glm_moe_dsa", HF_GOLDEN("glm_moe_dsa")},
    {"linear attention (Gated DeltaNet)", "blocks/gated_deltanet", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"layer_types=linear_attention", "blocks/gated_deltanet", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"layer_types=full_attention", "blocks/attention", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"attention output gate", "blocks/attention", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"q/k norm", "blocks/attention", "qwen3", HF_GOLDEN("qwen3")},
    {"attention bias (q/k/v)", "blocks/attention", "qwen2", HF_GOLDEN("qwen2")},
    {"partial rotary", "blocks/attention", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"RoPE scaling yarn", "model/hparams rope_inv_freq", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"RoPE scaling llama3", "model/hparams rope_inv_freq", "llama",
     "tests/unit/model/model_test.cpp Llama.Llama3RopeMatchesTransformers"},
    // feed-forward and routing
    {"dense SwiGLU MLP", "blocks/mlp", "llama", HF_GOLDEN("llama")},
    {"dense SwiGLU MLP", "blocks/mlp", "deepseek_v3", HF_GOLDEN("deepseek_v3")},  // layer 0 dense
    {"hidden_act=silu", "blocks/mlp", "llama", HF_GOLDEN("llama")},
    {"MoE softmax routing", "blocks/moe", "mixtral", HF_GOLDEN("mixtral")},
    {"MoE softmax routing", "blocks/moe", "qwen3_moe", HF_GOLDEN("qwen3_moe")},
    {"scoring_func=softmax", "blocks/moe", "qwen3_moe", HF_GOLDEN("qwen3_moe")},
    {"MoE sigmoid routing", "blocks/moe_sigmoid", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"scoring_func=sigmoid", "blocks/moe_sigmoid", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"topk_method=noaux_tc", "blocks/moe_sigmoid", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"shared experts", "blocks/moe_sigmoid", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    {"MoE sigmoid routing", "blocks/moe_sigmoid", "deepseek_v32", HF_GOLDEN("deepseek_v32")},
    {"scoring_func=sigmoid", "blocks/moe_sigmoid", "deepseek_v32", HF_GOLDEN("deepseek_v32")},
    {"shared experts", "blocks/moe_sigmoid", "deepseek_v32", HF_GOLDEN("deepseek_v32")},
    {"MoE sigmoid routing", "blocks/moe_sigmoid", "glm_moe_dsa", HF_GOLDEN("glm_moe_dsa")},
    {"scoring_func=sigmoid", "blocks/moe_sigmoid", "glm_moe_dsa", HF_GOLDEN("glm_moe_dsa")},
    {"shared experts", "blocks/moe_sigmoid", "glm_moe_dsa", HF_GOLDEN("glm_moe_dsa")},
    {"gated shared expert", "adapters/qwen3_next", "qwen3_next", HF_GOLDEN("qwen3_next")},
    {"mlp_layer_types=dense", "blocks/mlp", "deepseek_v3", HF_GOLDEN("deepseek_v3")},  // layer 0 dense
    {"mlp_layer_types=sparse", "blocks/moe_sigmoid", "deepseek_v3", HF_GOLDEN("deepseek_v3")},
    // embeddings and weights
    {"tied embeddings", "blocks/dense_decoder", "qwen2", HF_GOLDEN("qwen2")},
    {"FP8 block scales", "checkpoint/fp8 (dequantized at load)", "deepseek_v3", HF_GOLDEN("deepseek_v3_fp8")},
    // DeepSeek-V4 (tests/data/golden/deepseek_v4.yaml: sliding, CSA, HCA and CSA layers, layer 0
    // hash-routed, 2 residual streams, 2 output groups, swiglu_limit 10)
    {"shared-KV attention (DeepSeek-V4)", "blocks/v4_attention", "deepseek_v4", V4_GOLDEN},
    {"layer_types=sliding_attention", "blocks/v4_attention", "deepseek_v4", V4_GOLDEN},
    {"layer_types=compressed_sparse_attention", "blocks/v4_attention, v4_compressor, v4_indexer", "deepseek_v4", V4_GOLDEN},
    {"layer_types=heavily_compressed_attention", "blocks/v4_attention, v4_compressor", "deepseek_v4", V4_GOLDEN},
    {"compressed KV attention", "blocks/v4_compressor", "deepseek_v4", V4_GOLDEN},
    {"grouped output projection", "blocks/v4_attention", "deepseek_v4", V4_GOLDEN},
    {"hyper-connections", "blocks/mhc", "deepseek_v4", V4_GOLDEN},
    {"scoring_func=sqrtsoftplus", "blocks/v4_routing", "deepseek_v4", V4_GOLDEN},
    {"mlp_layer_types=hash_moe", "blocks/v4_routing", "deepseek_v4", V4_GOLDEN},
    {"mlp_layer_types=moe", "blocks/moe", "deepseek_v4", V4_GOLDEN},
    {"clamped SwiGLU", "blocks/mlp (swiglu_limited)", "deepseek_v4", V4_GOLDEN},
    {"shared experts", "blocks/mlp", "deepseek_v4", V4_GOLDEN},
    {"partial rotary", "blocks/v4_attention", "deepseek_v4", V4_GOLDEN},
    {"attention sinks (DeepSeek-V4)", "blocks/v4_attention", "deepseek_v4", V4_GOLDEN},
    {"lightning indexer (DeepSeek-V4)", "blocks/v4_indexer", "deepseek_v4", V4_GOLDEN},
};

#undef V4_GOLDEN
#undef HF_GOLDEN

}  // namespace

const std::vector<Proof>& proofs() { return kProofs; }

std::vector<const Proof*> proofs_of(const std::string& feature) {
  std::vector<const Proof*> out;
  for (const Proof& p : kProofs)
    if (feature == p.feature) out.push_back(&p);
  return out;
}

std::string closest_families(const std::vector<std::string>& feature_keys) {
  std::set<std::string> wanted(feature_keys.begin(), feature_keys.end());
  std::map<std::string, std::set<std::string>> runs;  // adapter -> the wanted keys it proves
  for (const Proof& p : kProofs)
    if (wanted.count(p.feature)) runs[p.adapter].insert(p.feature);
  size_t best = 0;
  for (const auto& [adapter, keys] : runs) best = std::max(best, keys.size());
  if (best == 0) return "";
  // Ties are named together, each with what it runs; "differs in" is what none of them runs.
  std::string names, differs;
  std::set<std::string> covered;
  for (const auto& [adapter, keys] : runs) {
    if (keys.size() != best) continue;
    std::string list;
    for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
    names += (names.empty() ? "" : ", ") + adapter + " (runs " + list + ")";
    covered.insert(keys.begin(), keys.end());
  }
  for (const std::string& k : wanted)
    if (!covered.count(k)) differs += (differs.empty() ? "" : ", ") + k;
  return "closest: " + names + (differs.empty() ? "" : "; differs in: " + differs);
}

}  // namespace dayzero::analysis
