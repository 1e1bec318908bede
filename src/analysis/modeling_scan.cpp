// modeling_*.py -> imports, classes and findings (modeling_scan.h). Constructs are matched on
// the code with its strings emptied, so a docstring that mentions a sliding window is not one.
#include "analysis/modeling_scan.h"

#include <algorithm>
#include <regex>

#include "analysis/python_source.h"

namespace dayzero::analysis {
namespace {

// Packages a modeling file imports for plain tensor code (nothing to map).
bool is_plain(const std::string& p) {
  static const char* const kPlain[] = {
      ".",        "__future__", "typing",   "typing_extensions", "math",         "os",         "sys",
      "re",       "json",       "copy",     "inspect",           "warnings",     "functools",  "itertools",
      "collections", "dataclasses", "enum", "abc",               "contextlib",   "types",      "logging",
      "time",     "importlib",  "operator", "numbers",           "packaging",    "safetensors", "huggingface_hub",
      "numpy",    "torch",      "transformers", "einops",        "PIL",          "tokenizers", "accelerate"};
  return std::find_if(std::begin(kPlain), std::end(kPlain), [&](const char* x) { return p == x; }) != std::end(kPlain);
}

struct Kernel {
  const char* package;
  bool supported;
  const char* what;  // supported: the block; else what a new op must do
};
// Kernel packages of published modeling files and what dayzero has for them.
const Kernel kKernels[] = {
    {"flash_attn", true, "blocks/attention (the same exact softmax attention, unfused)"},
    {"deep_gemm", true, "checkpoint/fp8 (FP8 block-scaled weights dequantized at load; the matmuls are plain)"},
    {"causal_conv1d", true, "blocks/gated_deltanet (its short causal convolution)"},
    {"triton", false, "custom Triton kernels"},
    {"tilelang", false, "custom TileLang kernels"},
    {"fla", false, "flash-linear-attention kernels"},
    {"mamba_ssm", false, "selective-scan (Mamba) kernels"},
    {"xformers", false, "xFormers attention kernels"},
    {"flashinfer", false, "FlashInfer kernels"},
    {"vllm", false, "vLLM kernels"},
    {"sglang", false, "SGLang kernels"},
    {"megablocks", false, "a block-sparse fused MoE"},
    {"grouped_gemm", false, "a grouped-GEMM fused MoE"},
    {"apex", false, "NVIDIA Apex fused layers"},
    {"liger_kernel", false, "Liger fused kernels"},
    {"bitsandbytes", false, "bitsandbytes quantized matmuls"},
};

struct Construct {
  const char* name;
  const char* pattern;
  const char* missing;
};
const Construct kConstructs[] = {
    {"sliding window", R"(sliding_window|SlidingWindow)", "a bounded-window KV cache and mask"},
    {"chunked attention", R"(attention_chunk_size|chunked_attention|attn_chunk)", "a chunked (block-local) attention mask"},
    {"soft-capping", R"(softcap)", "tanh soft-capping of attention scores or final logits"},
    {"attention sinks", R"(\bsinks\b|attention_sink|\bsink_)", "a sink term in the attention softmax"},
    {"ALiBi", R"([Aa]libi|ALIBI)", "ALiBi position biases"},
    {"NoPE layers", R"(\bno_rope|\bnope_layer|NoPE|use_rope\b)", "layers without rotary positions (NoPE)"},
    {"multimodal RoPE (M-RoPE)", R"(mrope|rope_deltas|get_rope_index)", "3-D rotary positions"},
    {"fused MoE kernel", R"(fused_moe|fused_experts|moe_align_block_size)",
     "a fused MoE kernel (blocks/moe runs experts one by one; its routing must be checked)"},
};

std::string top_package(std::string_view module) {
  while (!module.empty() && module.front() == ' ') module.remove_prefix(1);
  if (!module.empty() && module.front() == '.') return ".";
  const size_t e = module.find_first_of(". ,");
  return std::string(module.substr(0, e));
}

}  // namespace

ModelingScan scan_modeling(std::string_view source, const std::string& file_name) {
  ModelingScan s;
  s.file = file_name;
  const auto add_import = [&](const std::string& pkg, const PyLine& l) {
    if (pkg.empty() || std::find(s.imports.begin(), s.imports.end(), pkg) != s.imports.end()) return;
    s.imports.push_back(pkg);
    if (is_plain(pkg)) return;
    const std::string ev = file_name + ":" + std::to_string(l.line) + " " + l.code.substr(0, 80) +
                           (l.indent > 0 ? " (inside a block: may be optional)" : "");
    for (const Kernel& k : kKernels)
      if (pkg == k.package) {
        s.findings.push_back({"import " + pkg, k.supported, k.supported ? k.what : std::string("needs a new op: ") + k.what, ev});
        return;
      }
    s.findings.push_back({"import " + pkg, false, "needs a new op: unknown package '" + pkg + "' (kernels or code dayzero does not have)", ev});
  };
  static const std::regex ops(R"(torch\.ops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*))");
  static const std::regex cls(R"(^class\s+([A-Za-z_]\w*))");
  std::vector<std::regex> constructs;
  for (const Construct& c : kConstructs) constructs.emplace_back(c.pattern);
  std::vector<bool> seen(std::size(kConstructs), false);
  for (const PyLine& l : python_logical_lines(source)) {
    const std::string& code = l.code;
    if (code.rfind("import ", 0) == 0) {
      std::string_view rest = std::string_view(code).substr(7);
      size_t from = 0;
      while (from <= rest.size()) {
        const size_t comma = std::min(rest.find(',', from), rest.size());
        add_import(top_package(rest.substr(from, comma - from)), l);
        from = comma + 1;
      }
      continue;
    }
    if (code.rfind("from ", 0) == 0) {
      add_import(top_package(std::string_view(code).substr(5)), l);
      continue;
    }
    std::smatch m;
    if (std::regex_search(code, m, cls)) s.classes.push_back(m[1]);
    for (auto it = std::sregex_iterator(code.begin(), code.end(), ops); it != std::sregex_iterator(); ++it) {
      const std::string name = "torch.ops." + (*it)[1].str() + "." + (*it)[2].str();
      if (std::any_of(s.findings.begin(), s.findings.end(), [&](const CodeFinding& f) { return f.name == name; })) continue;
      const bool aten = (*it)[1] == "aten";
      s.findings.push_back({name, aten, aten ? "a PyTorch aten op (kernels/ops.h has the tensor ops)" : "needs a new op: custom operator " + name,
                            file_name + ":" + std::to_string(l.line)});
    }
    // MLA's qk_nope_head_dim is not a NoPE layer.
    static const std::regex mla_nope(R"(qk_nope\w*)");
    const std::string stripped = std::regex_replace(code, mla_nope, "");
    for (size_t i = 0; i < constructs.size(); ++i) {
      if (seen[i] || !std::regex_search(stripped, constructs[i])) continue;
      seen[i] = true;
      s.findings.push_back({kConstructs[i].name, false, std::string("needs a new block: ") + kConstructs[i].missing,
                            file_name + ":" + std::to_string(l.line) + " " + code.substr(0, 80)});
    }
  }
  return s;
}

}  // namespace dayzero::analysis
