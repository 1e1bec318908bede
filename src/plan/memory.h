// The memory model: bytes one rank will hold on its device under a plan: the exact slices of
// the weights it owns (slicing.h), its share of the KV cache, activations and workspace of one
// forward, and a fixed headroom. It is an estimate for choosing and checking plans, not an
// allocator; the runtime's allocations are what they are, and this model is kept close to them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/stored_format.h"
#include "core/dtype.h"
#include "model/hparams.h"
#include "model/tensor_spec.h"
#include "plan/plan.h"
#include "plan/slicing.h"

namespace dayzero::plan {

// What the memory model counts for a weight (run config model.weights_on_device, `plan
// --weights-dtype`): its stored size, or a conversion to bfloat16 / float32.
enum class WeightsOnDevice { kAsStored, kBF16, kF32 };

// The cache one decoder layer keeps (the layer descriptors' LayerCache, model/layer_desc.h).
using model::LayerCache;

// Element size of a recurrent state (f32: it accumulates over the whole sequence).
inline constexpr int64_t kStateBytes = 4;

struct MemoryParams {
  int64_t bytes_per_weight = 2;       // element size of weights on the device (converted)
  // Weights kept as stored: the element size of each spec as the checkpoint stores it, parallel
  // to the specs (FP8 1, BF16 2, F32 4); a block-quantized weight stored in one byte then also
  // holds the f32 block scales that cover its slice. Empty: every weight is converted to
  // bytes_per_weight and scales are not held (the loader dequantizes them away).
  std::vector<int64_t> stored_bytes;
  int64_t bytes_per_activation = 2;   // compute dtype: KV cache and activations (CPU f32: 4)
  int64_t max_context_tokens = 4096;  // per sequence: KV cache length, longest prefill
  int batch = 1;                      // sequences resident at once
  int64_t headroom_bytes = int64_t{1} << 30;  // runtime, library workspaces, fragmentation
  std::vector<LayerCache> cache;      // [n_layer]: each layer descriptor's cache (layer_caches)
};

// heads / tp, or 1 when tp is a multiple of heads (each head then held by tp / heads ranks).
// REQUIRES: heads % tp == 0 or tp % heads == 0.
int64_t local_heads(int64_t heads, int tp);
// The caches of the layer descriptors, [layers.size()].
std::vector<LayerCache> layer_caches(const std::vector<model::LayerDesc>& layers);
// One rank's KV cache of one layer: batch x bytes_per_activation x (min(context, window) x
// (local_heads(kv_heads) x kv_per_head + whole_per_token) + compressed_entries(context) x
// compressed_per_entry).
int64_t layer_kv_bytes(const LayerCache& c, int tp, const MemoryParams& p);
// One rank's fixed state of one layer: batch x (local_heads(state_heads) x
// (conv_elements_per_head x bytes_per_activation + recurrent_per_head x kStateBytes) +
// pending_elements x bytes_per_activation).
int64_t layer_state_bytes(const LayerCache& c, int tp, const MemoryParams& p);
// KV cache and state of the decoder layers [begin, end) (p.cache) on one rank of a tp group of tp.
struct StageCache {
  int64_t kv = 0, state = 0;
};
StageCache stage_cache(int begin, int end, int tp, const MemoryParams& p);

// KV heads one rank of a tp group holds: n_head_kv / tp, or 1 when tp is a multiple of
// n_head_kv (each kv head is then replicated on tp / n_head_kv ranks).
int64_t local_kv_heads(const model::HParams& hp, int tp);

// Buffers of one forward over T = max_context_tokens x batch tokens, reused from layer to layer:
//   bytes_per_activation x T x (4 n_embd                         hidden, normed, o and down outputs
//                               + 2 (n_head / tp) head_dim       q, attention output
//                               + 2 local_kv_heads head_dim      k, v of this chunk
//                               + 2 n_ff / tp)                   gate, up (silu(gate) * up in place)
//   + on the last stage: 4 x T x ceil(n_vocab / tp)              f32 logits of the local vocabulary
int64_t activation_bytes(const model::HParams& hp, int tp, bool last_stage, const MemoryParams& p);

// Element size of the block scales of an FP8 weight kept as stored (f32).
inline constexpr int64_t kScaleBytes = 4;  // stored_format(StoredScheme::kFp8Block).scale_bytes

// Which quantized weights a backend keeps as stored under model.weights_on_device: as_stored,
// by row of the stored-format table; the others it dequantises to f32 on load. CUDA keeps
// fp8-block, mxfp4 and nvfp4 (dequantised per GEMM) and counts an INT4 weight and an FP8 tensor
// without block scales as stored too (the run refuses them: they have no device form); the CPU
// keeps every row (converted inside its GEMM) and dequantises FP8 without block scales.
struct KeepsQuantized {
  bool schemes[kStoredSchemeCount] = {true, true, true, true};  // by StoredScheme
  bool fp8_unscaled = true;                                     // FP8 without block scales
  bool keeps(StoredScheme s) const { return schemes[static_cast<int>(s)]; }
  bool keeps_all() const {
    for (bool k : schemes)
      if (!k) return false;
    return fp8_unscaled;
  }
};
inline constexpr KeepsQuantized kCudaKeepsQuantized{{true, true, true, true}, true};
inline constexpr KeepsQuantized kCpuKeepsQuantized{{true, true, true, true}, false};
inline constexpr KeepsQuantized kKeepsNoQuantized{{false, false, false, false}, false};

// What a backend keeps of a weight stored as `stored` under model.weights_on_device: as stored,
// a quantized weight (model::is_stored_weight) of a scheme the backend keeps stays as stored
// (held_bytes: the table's StoredSlice::held_bytes, plan::stored_slice) in the dtype its tensor
// carries: FP8 its F8 dtype, INT4 I4 (only with BF16 group scales: `stored` is then the dtype of
// its scales), FP4 F4; else F32, dequantised on load. An FP8 tensor without block scales is F32
// unless keeps.fp8_unscaled; BF16 and F32 stay as they are, F16 becomes BF16 (the same two bytes;
// no backend has F16 kernels); bfloat16 / float32: every weight in that dtype.
DType kept_dtype(const model::TensorSpec& spec, DType stored, WeightsOnDevice weights, KeepsQuantized keeps = {});

// Bytes a device holds of spec `index`'s slice: 0 for skip_load specs (multi-token-prediction
// layers; FP8 scale tensors, which are counted with their weight) and for a slice not held;
// otherwise the slice at its element size (stored_bytes[index] when as stored, else
// bytes_per_weight), or, for a quantized weight kept as stored, the stored-format table's
// held_bytes of the slice (values, covering scales, global scale). The one rule of the memory model and the planner's tables.
int64_t held_bytes(const model::TensorSpec& spec, size_t index, const Slice& slice, const MemoryParams& p);

// Stored element sizes from config.json alone (no checkpoint to read), parallel to specs: 1 for
// quantized weights kept as stored (model::is_stored_weight: counted by the stored-format table),
// kScaleBytes for the FP8 scale tensors, `other` (config.json's torch_dtype) for the rest.
std::vector<int64_t> stored_bytes_from_config(const std::vector<model::TensorSpec>& specs, int64_t other);

// One rank's estimate: weights from slice_for over every spec (held_bytes), KV cache and state of
// its stage's layers (stage_cache), activations, headroom. REQUIRES: as slice_for.
RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp, const Plan& plan,
                       int rank, const MemoryParams& p, const EdgeNames& names = {});
// Every rank's estimate, [world_size]; dp replicas are identical (but for the experts of the ep_dp
// replicas of a wide expert group), so the first ep_dp replicas are computed and copied.
std::vector<RankMemory> estimate_memory(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                                        const Plan& plan, const MemoryParams& p, const EdgeNames& names = {});

// Plan::vision for a plan of these specs: present when any spec is a kVision or kProjector
// tensor; the bytes rank `stage 0, tp 0` of replica 0 holds of each (held_bytes of slice_for,
// as rank_memory counts them), the split alternative from hp.vision (n_layer_run encoder layers
// of n_embd; p.bytes_per_activation) and the sentence that gives the choice.
VisionPlacement vision_placement(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                                 const Plan& plan, const MemoryParams& p, const EdgeNames& names = {});

// The worst rank against a cap (the lowest rank among equal totals).
struct Fit {
  int worst_rank = -1;
  int64_t worst_bytes = 0;
  int64_t cap = 0;
  bool fits() const { return worst_bytes <= cap; }
  int64_t shortfall() const { return worst_bytes > cap ? worst_bytes - cap : 0; }
};
Fit check_fit(const std::vector<RankMemory>& memory, int64_t cap);
// "needs 83.1 GiB on rank 7, cap 72.0 GiB (short by 11.1 GiB)"; when it fits, the same
// without the shortfall.
std::string describe_fit(const Fit& f);

}  // namespace dayzero::plan
