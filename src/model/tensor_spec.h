// What an adapter expects of a checkpoint: every tensor by HF name, its shape in PyTorch
// order and how it is sharded over tensor-parallel ranks. The loader checks presence, shape,
// dtype and that nothing in the checkpoint is left unclaimed against this list.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/stored_format.h"
#include "core/tensor.h"

namespace dayzero::model {

enum class ShardRule {
  kReplicated,   // every rank of the tp group holds all of it (norms, biases of row-parallel outputs)
  kSplitDim0,    // column-parallel Linear: output rows split (q/k/v, gate/up)
  kSplitDim1,    // row-parallel Linear: input columns split (o, down), followed by an all-reduce
  kExpertOwned,  // whole tensor belongs to the rank owning that expert
  kVocabSplit,   // embedding / lm_head rows split by vocabulary range
};
const char* shard_rule_name(ShardRule r);

// What a tensor is for, set by the block or adapter that declares it: parameter counts by
// component (model/inspect.h) read this rather than the tensor's name.
enum class Component {
  kUnknown,
  kEmbedding,
  kAttention,     // q/k/v/o projections and their biases, MLA's low-rank projections
  kMlp,           // dense SwiGLU of a dense layer
  kRoutedExpert,  // one routed expert's gate/up/down
  kSharedExpert,  // the dense SwiGLU every token goes through in a shared-expert MoE layer
  kRouter,        // router weight and selection bias
  kNorm,          // every RMSNorm weight (layer norms, q/k norms, MLA's latent norms, final norm)
  kLmHead,
  kVision,       // a vision tower (patch embedding, encoder layers, its norms)
  kProjector,    // the multimodal projector from the tower into the text width
  kMtpHead,       // multi-token prediction's own projection, embedding and head
  kQuantScale,    // quantization storage, not parameters: FP8 block scales; INT4 packed words,
                  // group scales and shapes; FP4 codes, scales and global scales of a logical
                  // weight (the parameters count on the logical weight)
};
const char* component_name(Component c);

// How a quantized Linear weight is stored and where the checkpoint keeps its tensors: its row of
// the stored-format table (core/stored_format.h: fp8-block, int4-pack, mxfp4, nvfp4), the block
// one scale covers, and its placement. The adapter, or the quantization_config it reads, fills it
// (adapters/common.h attach_block_scale, pack_quant_specs.h, fp4_specs.h); the loader
// (stored_specs.h stored_layout), the planner (plan::stored_slice) and the backends read only it.
// The spec's name and shape are the logical weight [out, in] the forward pass sees.
enum class StoredPlacement : uint8_t {
  // The values under the weight's own name, the scales in `scale` (FP8's `_scale_inv`,
  // DeepSeek-V4's `.scale` of FP8 and of its in-place MXFP4 experts).
  kOwnName,
  // compressed-tensors: the logical weight is not on disk; `<module>.weight_packed`,
  // `.weight_scale` (and INT4's `.weight_shape`, NVFP4's `.weight_global_scale`) are declared as
  // specs of their own (kQuantScale, skip_load) and read with it.
  kCompanions,
};
struct StoredSpec {
  const StoredFormat* format = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  StoredPlacement placement = StoredPlacement::kOwnName;
  std::string scale = {};  // kOwnName: the scale tensor's name
};

struct TensorSpec {
  std::string name;  // full HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  ShardRule rule = ShardRule::kReplicated;
  int layer = -1;    // decoder layer index, -1 for embedding / final norm / lm_head
  // Splits happen in whole blocks of this many rows (dim 0) or columns (dim 1): head_dim for
  // attention projections, so a rank always holds whole heads. When tp exceeds the number of
  // blocks (kv heads < tp) each rank holds one block, shared by tp / blocks ranks.
  int64_t shard_block = 1;
  // kExpertOwned: which routed expert of how many; the rank owning it splits it etp ways
  // along expert_split_dim (0 for gate/up, 1 for down), -1 when never split.
  int expert = -1;
  int n_expert = 0;
  int expert_split_dim = -1;
  // Declared so the checkpoint check claims it (shape, dtype), never loaded: multi-token-
  // prediction layers, and the stored companions of quantized weights (read with their weight).
  bool skip_load = false;
  // A quantized Linear weight kept as stored, or one of its stored companions (kQuantScale):
  // StoredSpec below. format nullptr: neither.
  StoredSpec stored = {};
  // An integer table rather than weights (hash routing's tid2eid: token id -> the ids of the
  // experts it goes to), stored as I32 with every value in [0, index_range); 0: a float tensor.
  int64_t index_range = 0;
  Component component = Component::kUnknown;
  // kSplitDim0 of a fused tensor whose rows are consecutive sections (their rows summing to
  // shape[0]), each split over tp in its own blocks as a tensor of its own would be (shard_block
  // unused): a rank holds its part of every section, concatenated in section order (Gated
  // DeltaNet's [q | k | v] rows). Empty: one section.
  struct Section {
    int64_t rows = 0, block = 1;
  };
  std::vector<Section> shard_sections = {};
};

// Whether spec is a quantized weight kept as stored (not one of its companions).
inline bool is_stored_weight(const TensorSpec& s) {
  return s.stored.format != nullptr && s.component != Component::kQuantScale;
}
// Whether spec is a quantized weight of `scheme`.
inline bool is_stored_weight(const TensorSpec& s, StoredScheme scheme) {
  return is_stored_weight(s) && s.stored.format->scheme == scheme;
}

// The shape the checkpoint holds under spec's own name: its shape, or [out, ceil(in / 2)] for
// 4-bit codes in place (DeepSeek-V4's MXFP4 experts); nullopt when nothing is under its name (a
// compressed-tensors logical weight, whose companions are specs of their own).
std::optional<Shape> on_disk_shape(const TensorSpec& s);

// Whether a checkpoint tensor stored as t can be this spec: an integer table (index_range > 0)
// is I32 or I64, quantization storage (kQuantScale) anything, 4-bit codes in place U8 or I8,
// every other tensor a float type;
// expected_dtype names what fits for a message ("a float type", "I32 or I64").
bool stored_dtype_fits(const TensorSpec& s, DType t);
const char* expected_dtype(const TensorSpec& s);

// Sets the component of specs[from ..] (a block tags what it just declared).
void set_component(std::vector<TensorSpec>& specs, size_t from, Component c);

// Puts prefix before every spec's name and stored scale name (a multimodal checkpoint nests its text
// model under "language_model.").
void prefix_tensor_names(std::vector<TensorSpec>& specs, const std::string& prefix);

// Expands "model.layers.{L}.mlp.up_proj.weight" with L (one template helper for every adapter).
std::string layer_tensor_name(const std::string& tmpl, int layer);
// Expands {L} and {E} ("model.layers.{L}.mlp.experts.{E}.up_proj.weight").
std::string expert_tensor_name(const std::string& tmpl, int layer, int expert);

}  // namespace dayzero::model
