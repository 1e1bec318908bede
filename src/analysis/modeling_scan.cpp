// modeling_*.py -> imports, classes and findings (modeling_scan.h). Constructs are matched on
// the code with its strings emptied, so a docstring that mentions a sliding window is not one.
#include "analysis/modeling_scan.h"

#include <algorithm>
#include <cctype>
#include <map>
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

namespace {

// The code with whitespace dropped except between two identifier characters (kept as one
// space), so fingerprints need not spell out spacing: "(q * cos) + x" -> "(q*cos)+x".
std::string squeeze(const std::string& code) {
  std::string out;
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  bool gap = false;
  for (char c : code) {
    if (c == ' ' || c == '\t' || c == '\n') { gap = true; continue; }
    if (gap && !out.empty() && word(out.back()) && word(c)) out += ' ';
    gap = false;
    out += c;
  }
  return out;
}

struct Fingerprint {
  const char* kind;  // "class" or "function"
  const char* block;
  const char* how;
  std::vector<const char*> all;   // regular expressions, each must match the squeezed code
  std::vector<const char*> none;  // none of these may match
  const char* twice = nullptr;    // a literal that must occur at least twice (no unbounded regex:
                                  // libstdc++'s recursion would overflow on a long class)
};

// One computation per block: each fingerprint is what the block computes, as transformers'
// modeling files of the families with an adapter write it.
const std::vector<Fingerprint>& fingerprints() {
  static const std::vector<Fingerprint> k = {
      {"class", "blocks/norm", "RMSNorm: x * rsqrt(mean(x^2) + eps) * weight",
       {R"((pow\(2\)|square\(\))\.mean\(-1)", R"(rsqrt\()", R"(self\.weight\*)"}, {R"(1(\.0)?\+self\.weight)"}},
      {"class", "blocks/mlp", "gated MLP: down(act(gate(x)) * up(x))",
       {R"(down_proj\(self\.act_fn\(self\.gate_proj\((\w+)\)\)\*self\.up_proj\(\1\)\))"}, {R"(clamp)"}},
      {"class", "model/hparams rope_inv_freq (rotary cos / sin tables, half-split)",
       "rotary tables: cos and sin of positions x inv_freq, duplicated over both halves",
       {R"(inv_freq)", R"(cat\(\(freqs,freqs\),dim=-1\)|cat\(\[freqs,freqs\],dim=-1\))", R"(\.cos\(\))", R"(\.sin\(\))"}, {}},
      {"class", "blocks/attention", "softmax attention: q/k/v/o projections, rotary, the attention function",
       {R"(self\.q_proj\()", R"(self\.k_proj\()", R"(self\.v_proj\()", R"(self\.o_proj\()", R"(apply_rotary_pos_emb\()"},
       {R"(sinks|s_aux|compressor|sliding_window)"}},
      {"class", "blocks/mla", "MLA: kv_a_proj_with_mqa to the latent, kv_b_proj up, q low-rank",
       {R"(kv_a_proj_with_mqa\()", R"(kv_b_proj\()"}, {R"(sinks|s_aux|compressor)"}},
      {"class", "blocks/dense_decoder", "pre-norm residual layer: x + attn(norm(x)), then x + mlp(norm(x))",
       {R"(self\.self_attn\()", R"(self\.mlp\()"}, {}, "hidden_states=residual+hidden_states"},
      {"class", "blocks/dense_decoder", "the model: embedding, the layer loop, the final norm",
       {R"(self\.embed_tokens\()", R"(for \w+ in self\.layers)", R"(self\.norm\()"},
       {R"(self\.(?!embed_tokens\(|norm\(|rotary_emb\(|layers\b|config\b|gradient_checkpointing\b|training\b|post_init\()\w+\()"}},
      {"class", "blocks/dense_decoder", "the causal LM head: lm_head over the model's last hidden states",
       {R"(self\.model\()", R"(self\.lm_head\()"}, {}},
      {"class", "blocks/moe", "experts one by one: one_hot dispatch, act(gate) * up, down, index_add",
       {R"(one_hot\()", R"(act_fn\(gate\)\*up)", R"(index_add_\()"}, {R"(clamp)"}},
      {"class", "blocks/moe", "softmax router: router_logits = linear(x, weight), softmax over them, top-k",
       {R"(router_logits=F\.linear\(\w+,self\.weight\))", R"(softmax\(router_logits)", R"(topk\()"},
       {R"(sigmoid|score_fn|input_ids)"}},
      {"class", "blocks/moe_sigmoid", "sigmoid router with a selection bias: sigmoid, + e_score_correction_bias, top-k",
       {R"(sigmoid\()", R"(e_score_correction_bias)", R"(topk\()"}, {R"(score_fn|input_ids)"}},
      {"class", "blocks/moe", "MoE block: router, routed experts (and shared experts)",
       {R"(self\.gate\()", R"(self\.experts\()"}, {R"(input_ids)"}},
      {"function", "blocks/attention", "rotate_half: cat(-x2, x1) of the two halves",
       {R"(cat\(\(-x2,x1\),dim=-1\))"}, {}},
      {"function", "blocks/attention", "rotary embedding: q * cos + rotate_half(q) * sin, the same for k",
       {R"(q\*cos\)?\+\(?rotate_half\(q\)\*sin)", R"(k\*cos\)?\+\(?rotate_half\(k\)\*sin)"}, {}},
      {"function", "blocks/attention", "repeat_kv: key/value heads broadcast to the query heads",
       {R"(\[:,:,None,:,:\]\.expand\()"}, {}},
      {"function", "blocks/attention", "eager attention: softmax(q k^T * scale + mask) v",
       {R"(matmul\(query,key_states\.transpose\(2,3\)\))", R"(softmax\()", R"(matmul\(attn_weights,value_states\))"},
       {R"(sinks|s_aux|softcap)"}},
  };
  return k;
}

constexpr size_t kMaxMatchChars = 64 * 1024;

struct Hint {
  const char* pattern;
  const char* what;
};
const Hint kHints[] = {
    {"HyperConnection|HyperHead", "hyper-connections"},
    {"CSACompressor", "compressed sparse attention"},
    {"HCACompressor", "heavily compressed attention"},
    {"Compressor", "compressed KV attention"},
    {"Indexer", "sparse-attention indexer"},
    {"HashRouter", "hash routing"},
    {"GroupedLinear", "grouped output projection"},
    {"DeltaAttention|DeltaNet|delta_attention|delta_rule", "delta-rule linear attention"},
    {"ForgetGate", "linear-attention forget gate"},
    {"Norm|norm", "a norm"},
    {"Rotary|rotary|rope", "rotary positions"},
    {"Router|Gate", "a router or gate"},
    {"Experts|MoE|Moe", "experts"},
    {"MLP", "an MLP"},
    {"Attention|attention", "attention"},
    {"conv", "a convolution"},
};

std::string hint_of(const std::string& name) {
  for (const Hint& h : kHints)
    if (std::regex_search(name, std::regex(h.pattern))) return h.what;
  return "";
}

bool module_base(const std::string& bases, const std::vector<std::string>& modules) {
  static const std::regex known(R"(nn\.Module|nn\.Linear|nn\.Embedding|GradientCheckpointingLayer|PreTrainedModel|GenerationMixin)");
  if (std::regex_search(bases, known)) return true;
  for (const std::string& m : modules)
    if (std::regex_search(bases, std::regex("\\b" + m + "\\b"))) return true;
  return false;
}

}  // namespace

std::vector<ModuleAccount> account_modules(std::string_view source) {
  struct Def {
    std::string name, kind, base;
    int line = 0;
    std::map<std::string, std::string> methods;  // class: method -> squeezed body; function: "" -> body
  };
  std::vector<Def> defs;
  Def* cur = nullptr;
  std::string method;
  int body_indent = -1;
  static const std::regex cls(R"(^class\s+([A-Za-z_]\w*)\s*(\((.*)\))?\s*:)");
  static const std::regex fn(R"(^(async\s+)?def\s+([A-Za-z_]\w*))");
  for (const PyLine& l : python_logical_lines(source)) {
    std::smatch m;
    // A def or class header is short; the cut keeps std::regex's recursion bounded.
    const std::string head = l.code.substr(0, 2048);
    if (l.indent == 0) {
      cur = nullptr;
      if (std::regex_search(head, m, cls)) {
        defs.push_back({m[1], "class", m[3], l.line, {}});
        cur = &defs.back();
        body_indent = -1;
      } else if (std::regex_search(head, m, fn)) {
        defs.push_back({m[2], "function", "", l.line, {}});
        cur = &defs.back();
        method = "";
      }
      continue;
    }
    if (!cur) continue;
    if (cur->kind == "class") {
      if (body_indent < 0) body_indent = l.indent;
      if (l.indent == body_indent) {
        const std::string stmt = head.substr(std::min(head.size(), head.find_first_not_of(' ')));
        if (std::regex_search(stmt, m, fn)) method = m[2];
        else method = "";
        continue;
      }
      if (!method.empty()) cur->methods[method] += squeeze(l.code) + "\n";
    } else {
      cur->methods[""] += squeeze(l.code) + "\n";
    }
  }
  // Module classes (a base that is a torch module or a module class of the file) and the code
  // their computation runs: forward and the other methods but __init__ (helpers it calls).
  std::vector<std::string> module_names;
  std::vector<ModuleAccount> out;
  std::vector<std::pair<const Def*, std::string>> todo;
  for (const Def& d : defs) {
    if (d.kind != "class" || !module_base(d.base, module_names)) continue;
    module_names.push_back(d.name);
    std::string code;
    for (const auto& [name, body] : d.methods)
      if (name != "__init__" && name != "extra_repr" && name != "_init_weights") code += body;
    todo.push_back({&d, code});
  }
  // Top-level functions a module's code names (eager_attention_forward is passed, not called),
  // and those these functions name in turn.
  std::vector<std::string> used;
  for (size_t i = 0; i < todo.size(); ++i) {
    for (const Def& f : defs) {
      if (f.kind != "function" || std::find(used.begin(), used.end(), f.name) != used.end()) continue;
      if (!std::regex_search(todo[i].second, std::regex("\\b" + f.name + "\\b"))) continue;
      used.push_back(f.name);
      todo.push_back({&f, f.methods.count("") ? f.methods.at("") : ""});
    }
  }
  for (const auto& [d, code] : todo) {
    ModuleAccount a{d->name, d->kind, d->base, d->line, "", "", hint_of(d->name)};
    if (d->kind == "function" && std::regex_search(d->name, std::regex("loss"))) {
      a.block = "none (a training loss: inference does not compute it)";
      out.push_back(std::move(a));
      continue;
    }
    if (d->kind == "class" && code.empty()) {
      a.block = "none (no forward: holds weights or init rules, computes nothing)";
      out.push_back(std::move(a));
      continue;
    }
    if (code.size() > kMaxMatchChars) {  // std::regex recurses per character: not on a body this long
      a.how = "not matched: " + std::to_string(code.size()) + " characters of code, more than a module's";
      out.push_back(std::move(a));
      continue;
    }
    for (const Fingerprint& f : fingerprints()) {
      if (d->kind != f.kind) continue;
      const bool all = std::all_of(f.all.begin(), f.all.end(), [&](const char* r) { return std::regex_search(code, std::regex(r)); });
      const bool none = std::none_of(f.none.begin(), f.none.end(), [&](const char* r) { return std::regex_search(code, std::regex(r)); });
      const bool twice = !f.twice || [&] {
        const size_t first = code.find(f.twice);
        return first != std::string::npos && code.find(f.twice, first + 1) != std::string::npos;
      }();
      if (all && none && twice) {
        a.block = f.block;
        a.how = f.how;
        break;
      }
    }
    if (a.block.empty()) {  // what it runs, for the reader: the modules and functions it calls
      static const std::regex call(R"((self\.\w+|\b[A-Za-z_]\w*)\()");
      std::vector<std::string> calls;
      for (auto it = std::sregex_iterator(code.begin(), code.end(), call); it != std::sregex_iterator() && calls.size() < 8; ++it) {
        const std::string c = (*it)[1];
        static const char* const kSkip[] = {"super", "isinstance", "getattr", "len", "range", "tuple", "int", "float", "if", "for", "return", "not", "and", "or", "in"};
        if (std::any_of(std::begin(kSkip), std::end(kSkip), [&](const char* x) { return c == x; })) continue;
        if (std::find(calls.begin(), calls.end(), c) == calls.end()) calls.push_back(c);
      }
      for (const std::string& c : calls) a.how += (a.how.empty() ? "calls " : ", ") + c;
    }
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const ModuleAccount& x, const ModuleAccount& y) { return x.line < y.line; });
  return out;
}

ModelingScan scan_modeling(std::string_view source, const std::string& file_name) {
  ModelingScan s;
  s.file = file_name;
  s.modules = account_modules(source);
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
