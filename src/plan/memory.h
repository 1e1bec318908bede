// The memory model: bytes one rank will hold on its device under a plan: the exact slices of
// the weights it owns (slicing.h), its share of the KV cache, activations and workspace of one
// forward, and a fixed headroom. It is an estimate for choosing and checking plans, not an
// allocator; the runtime's allocations are what they are, and this model is kept close to them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/block_scale.h"
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
inline constexpr int64_t kScaleBytes = kBlockScaleBytes;

// The block-scaled view of a held slice of a 2-D FP8 spec (quant_block_rows/cols): its rows
// and columns, where it starts in the whole tensor, its block size. REQUIRES: slice.held.
BlockScaledSlice block_scaled_slice(const model::TensorSpec& spec, const Slice& slice);

// Which quantized weights a backend keeps as stored under model.weights_on_device: as_stored;
// the others it dequantises to f32 on load. CUDA ({true, true, true}) keeps block-scaled FP8
// and counts a pack-quantized INT4 weight and an FP8 tensor without block scales as stored too
// (the run refuses them: they have no device form) and keeps FP4 (dequantised per GEMM); the
// CPU ({true, true, false, true}) keeps block-scaled FP8, pack-quantized INT4 and FP4
// (converted inside its GEMM) and dequantises FP8 without block scales.
struct KeepsQuantized {
  bool fp8_blocks = true;    // block-scaled FP8 (a spec with a scale_name)
  bool int4 = true;          // pack-quantized INT4 (a spec with a pack_group)
  bool fp8_unscaled = true;  // FP8 without block scales
  bool fp4 = true;           // FP4 (MXFP4, NVFP4: a spec with fp4 set)
};
inline constexpr KeepsQuantized kCudaKeepsQuantized{true, true, true, true};
inline constexpr KeepsQuantized kCpuKeepsQuantized{true, true, false, true};

// What a backend keeps of a weight stored as `stored` under model.weights_on_device: as stored,
// a block-scaled FP8 weight (a spec with a scale_name) stays FP8 with its scales (held_bytes:
// BlockScaledSlice::device_bytes) where the backend keeps it (keeps.fp8_blocks) and is
// dequantised to F32 where it does not; a pack-quantized INT4 weight (`stored`: the dtype of its
// group scales) is I4, its int32 words and BF16 scales as stored (held_bytes:
// pack_quant_bytes), where keeps.int4 and its scales are BF16, else F32; an FP8 tensor without
// block scales is F32 unless keeps.fp8_unscaled; an FP4 weight (spec.fp4) is F4, its codes and
// scale bytes as stored (held_bytes: fp4_bytes), where keeps.fp4, else F32; BF16 and F32 stay as they are, F16 becomes BF16 (the
// same two bytes; no backend has F16 kernels); bfloat16 / float32: every weight in that dtype.
DType kept_dtype(const model::TensorSpec& spec, DType stored, WeightsOnDevice weights, KeepsQuantized keeps = {});

// Bytes a device holds of spec `index`'s slice: 0 for skip_load specs (multi-token-prediction
// layers; FP8 scale tensors, which are counted with their weight) and for a slice not held;
// otherwise the slice at its element size (stored_bytes[index] when as stored, else
// bytes_per_weight), plus, for a quantized weight stored in one byte, kScaleBytes for each
// scale block that covers the slice. The one rule of the memory model and the planner's tables.
int64_t held_bytes(const model::TensorSpec& spec, size_t index, const Slice& slice, const MemoryParams& p);

// Stored element sizes from config.json alone (no checkpoint to read), parallel to specs: 1 for
// block-quantized FP8 weights (specs with a scale_name: quantization_config fp8) and FP4 weights
// (spec.fp4: counted by fp4_bytes), kScaleBytes for the FP8 scale tensors, `other`
// (config.json's torch_dtype) for the rest.
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
