// The slicing rule: which part of each checkpoint tensor a rank holds under a plan. One rule
// shared by the memory model (what a rank will hold) and the loader (what a rank reads), so
// the planner's estimate and the bytes actually placed can never disagree. It does not read
// checkpoints or choose plans; infeasible tp sizes are the planner's to reject (check_tp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/hparams.h"
#include "model/layer_desc.h"
#include "model/tensor_spec.h"
#include "plan/plan.h"

namespace dayzero::model {
class Adapter;
}

namespace dayzero::plan {

// The part of one tensor a rank holds. dim == -1: the whole tensor (also used when a split
// happens to cover the full extent, e.g. tp == 1 or a replicated kv head block); otherwise
// rows (dim 0) or columns (dim 1) [begin, end) of the PyTorch-order shape.
// A sectioned split (spec.shard_sections) holds several row ranges: rows lists them in order
// (dim 0, begin and end 0); every other slice has rows empty.
struct Slice {
  bool held = false;
  int dim = -1;
  int64_t begin = 0, end = 0;
  std::vector<std::pair<int64_t, int64_t>> rows = {};
  bool operator==(const Slice&) const = default;
  // Rows (dim 0) or columns (dim 1) held; REQUIRES: dim >= 0.
  int64_t extent() const;
};

// The tensors outside the decoder layers (layer == -1) that are placed by name: the embedding
// goes with the first stage, the final norm and lm_head with the last. lm_head == embed when
// the embeddings are tied (the last stage then holds the embedding too, as its lm_head).
// Any other layer -1 tensor goes with the first stage (parts that run before layer 0).
struct EdgeNames {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";
};
// The names an adapter uses for this model (lm_head_name(hp) is the embedding when tied).
EdgeNames edge_names(const model::Adapter& adapter, const model::HParams& hp);

// Whether a stage holds a tensor at all, before any tp split. Layers >= n_layer (stacked
// after the decoder, e.g. multi-token prediction) and the head's tensors (component lm_head)
// go with the last stage, the other tensors outside the layers with the first.
bool stage_holds(const model::TensorSpec& spec, const model::HParams& hp, const Stage& stage,
                 const EdgeNames& names = {});

// The tp part of the rule, for a rank at tp_rank of a group of tp_size:
//   kReplicated, kExpertOwned: the whole tensor (experts are spread later, with ep).
//   kSplitDim0/1: blocks = shape[dim] / shard_block. blocks % tp == 0: contiguous
//     blocks [tp_rank*blocks/tp, (tp_rank+1)*blocks/tp); tp % blocks == 0: block
//     tp_rank / (tp / blocks), shared by tp / blocks ranks (kv heads fewer than tp).
//     With shard_sections, each section is split so (in its own blocks) at its offset in the rows.
//   kVocabSplit: rows in tp contiguous ranges of ceil(n / tp), the last one shorter (a range
//     past the end is empty but held).
// REQUIRES: check_tp(spec, tp) is ok (DZ_CHECK otherwise); 0 <= tp_rank < tp_size.
Slice tp_slice(const model::TensorSpec& spec, int tp_size, int tp_rank);
// tp_slice, except routed experts (kExpertOwned with an expert index): held by the ep rank of
// their block of n_expert / ep, split etp ways along expert_split_dim. expert_rank = ep_rank *
// etp + etp_rank, which is tp_rank when the experts stay inside the tp group (the default, -1)
// and (dp_rank % ep_dp) * tp + tp_rank under wide expert parallelism (plan.h).
// REQUIRES: check_experts ok.
Slice rank_slice(const model::TensorSpec& spec, int tp, int ep, int etp, int tp_rank, int expert_rank = -1);
// Whether ep and etp can split this expert tensor (a reason when not).
Status check_experts(const model::TensorSpec& spec, int ep, int etp);

// The slice `rank` holds under `plan`: stage_holds for its stage, then tp_slice for its tp
// coordinate. REQUIRES: 0 <= rank < plan.world_size and a tp size check_tp accepts.
Slice slice_for(const model::TensorSpec& spec, const model::HParams& hp, const Plan& plan, int rank,
                const EdgeNames& names = {});

// Bytes of a slice with elements of bytes_per_element; 0 when not held.
int64_t slice_bytes(const model::TensorSpec& spec, const Slice& slice, int64_t bytes_per_element);
// The stored-format table's view of a held slice of a quantized weight kept as stored
// (model::is_stored_weight, 2-D): its rows and columns, where it starts in the whole weight, the
// block one scale covers. Its held_bytes() (values covering the columns, the scales of the
// blocks covering the slice, a global scale) is what the loaders read (checkpoint/stored.h) and
// the backends allocate (to_device_stored). REQUIRES: slice.held.
StoredSlice stored_slice(const model::TensorSpec& spec, const Slice& slice);
// Its values alone: the bytes the loader's record counts as read. 0 for a slice not held.
int64_t stored_value_bytes(const model::TensorSpec& spec, const Slice& slice);

// Whether the spec's shard rule can split it over tp ranks. InvalidArgument with a reason that
// names the tensor ("...k_proj.weight: 8 blocks (1024 rows in blocks of 128) are not divisible
// by 3 and 3 is not a multiple of 8"). REQUIRES: tp >= 1.
Status check_tp(const model::TensorSpec& spec, int tp);
// Whether the whole model splits over tp ranks: attention heads divisible by tp, kv heads
// divisible by tp or dividing it, every layer's recurrent-state head groups (layers, the layer
// descriptors) divisible by tp, then every split spec (check_tp). The reason is a sentence
// without context, e.g. "64 attention heads are not divisible by 3".
Status check_tp(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                const std::vector<model::LayerDesc>& layers, int tp);

}  // namespace dayzero::plan
