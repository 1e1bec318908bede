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

struct ModelingScan {
  std::string file;
  std::vector<std::string> imports;  // top-level packages, in order, once each ("." for relative)
  std::vector<std::string> classes;  // classes the file defines
  std::vector<CodeFinding> findings;
};

ModelingScan scan_modeling(std::string_view source, const std::string& file_name);

}  // namespace dayzero::analysis
