// What a model folder's own modeling_*.py asks of a runtime (read, never run): the packages it
// imports, the modules it defines, torch.ops calls and the attention constructs that need a
// block of their own (sliding windows, chunked attention, soft-capping, sinks, ALiBi, NoPE
// layers, M-RoPE). Each is mapped to what dayzero has; the rest "needs a new op".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dayzero::analysis {

struct CodeFinding {
  std::string name;      // "import triton", "torch.ops.my_kernels.fused_rms", "attention soft-capping"
  bool supported = false;
  std::string block;     // supported: the block; else what is missing ("needs a new op: ...")
  std::string evidence;  // "modeling_x.py:12 import triton"
};

// One nn.Module subclass, or one top-level function a module's forward uses, matched to a
// dayzero block by its computation (the forward's code with strings emptied against one
// fingerprint per block: RMSNorm's x * rsqrt(mean(x^2) + eps) * weight, the gated MLP's
// down(act(gate(x)) * up(x)), ...), or unmatched. A class name never matches by itself: `hint`
// (what the name suggests) is evidence for a reader, not a match.
struct ModuleAccount {
  std::string name, kind;  // kind: "class" or "function"
  std::string base;        // the class's bases as written ("nn.Module"); "" for a function
  int line = 0;            // 1-based line of the class / def
  std::string block;       // the matching block; "" unmatched
  std::string how;         // matched: the computation recognised; unmatched: what its forward calls
  std::string hint;        // what the name suggests ("hyper-connections"), "" when nothing
};

struct ModelingScan {
  std::string file;
  std::vector<std::string> imports;  // top-level packages, in order, once each ("." for relative)
  std::vector<std::string> classes;  // classes the file defines
  std::vector<CodeFinding> findings;
  std::vector<ModuleAccount> modules;  // every nn.Module subclass and the functions their forwards use
};

ModelingScan scan_modeling(std::string_view source, const std::string& file_name);

// The module accounting of scan_modeling alone (modules of a file).
std::vector<ModuleAccount> account_modules(std::string_view source);

}  // namespace dayzero::analysis
