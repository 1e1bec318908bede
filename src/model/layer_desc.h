// Layer descriptors: what each decoder layer of a model is, in the terms the planner, the
// memory model, the runtime's KV cache, the analysis and `plan`'s report need, so none of them
// reads a family's hyper-parameters. An adapter gives them for its config
// (Adapter::layer_kinds, completed with the weights by describe_layers); the generic analysis
// gives them for a family without an adapter. docs/architecture.md has an example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor_spec.h"

namespace dayzero::model {

// The token mixer of a layer.
enum class MixerKind {
  kAttention,        // softmax attention over the whole context (or a window: LayerCache::window)
  kMla,              // multi-head latent attention
  kSparseMla,        // MLA whose keys a sparse-attention indexer selects (DSA)
  kLinearAttention,  // a recurrent mixer with a fixed-size state (Gated DeltaNet)
  // DeepSeek-V4: a sliding window plus compressed entries of the whole context, one per
  // compress_rate tokens; CSA attends to the entries a lightning indexer picks, HCA to all.
  kCompressedSparse,
  kHeavilyCompressed,
};
const char* mixer_kind_name(MixerKind k);

// What a layer keeps per sequence between forward calls, as the runtime allocates it (one rank:
// heads split over tp) and the memory model counts it.
struct LayerCache {
  // Per token, growing with the context up to `window`: k and v, each kv_heads heads of
  // head_dim, heads split over tp like kv heads (a rank holds local_heads(kv_heads, tp)).
  int64_t kv_heads = 0, head_dim = 0;
  // Per token, held whole by every tp rank: a sparse-attention indexer's key (the runtime's
  // index_k) ...
  int64_t index_dim = 0;
  // ... and, in plans of the generic analysis only, an MLA latent (kv_lora_rank + rope dims) as
  // a serving engine caches it. dayzero's MLA block caches expanded k and v (kv_heads x
  // head_dim) instead, so no adapter sets it.
  int64_t latent_dim = 0;
  int64_t window = 0;  // tokens kept per sequence: 0 the whole context, else min(context, window)
  // The layer's own block attends within its window past it (its adapter's layer state keeps the
  // window: DeepSeek-V4); otherwise the generic attention blocks attend over the whole cache, and
  // a context longer than the window is refused (runtime/run/run_plan.cpp).
  bool window_attended = false;
  bool kv_shared = false;  // k and v are one vector (DeepSeek-V4's K=V head): head_dim per head, not 2 x
  // Per compress_rate tokens of the whole context (0: none), held whole by every tp rank: one
  // compressed KV entry of compressed_kv_dim and one indexer key of compressed_index_dim.
  int64_t compress_rate = 0, compressed_kv_dim = 0, compressed_index_dim = 0;
  // Per sequence, independent of the context: what a compressor holds between forward calls
  // (the tokens of a window not yet closed, their gates, the overlap of the previous window).
  int64_t pending_elements = 0;
  // Per sequence, independent of the context (linear attention): state_heads head groups split
  // over tp; each group holds conv_rows x conv_per_head elements of the causal conv's window at
  // the compute dtype, and v_per_head recurrent states [k_dim, v_dim] in f32.
  int64_t state_heads = 0, conv_rows = 0, conv_per_head = 0;
  int64_t v_per_head = 0, k_dim = 0, v_dim = 0;

  int64_t kv_per_head() const { return kv_shared ? head_dim : 2 * head_dim; }  // k and v
  int64_t compressed_per_entry() const { return compressed_kv_dim + compressed_index_dim; }
  int64_t whole_per_token() const { return index_dim + latent_dim; }
  int64_t conv_elements_per_head() const { return conv_rows * conv_per_head; }
  int64_t recurrent_per_head() const { return v_per_head * k_dim * v_dim; }
  bool has_state() const { return state_heads > 0; }
  // Compressed entries of a context of n tokens: floor(n / compress_rate).
  int64_t compressed_entries(int64_t n) const { return compress_rate > 0 ? n / compress_rate : 0; }
  bool operator==(const LayerCache&) const = default;
};

// The FFN of a layer.
enum class FfnKind {
  kDense,    // one SwiGLU MLP of width ff
  kExperts,  // n_expert routed experts of width ff (top n_used per token), plus a shared expert of shared_ff
};
const char* ffn_kind_name(FfnKind k);

struct LayerFfn {
  FfnKind kind = FfnKind::kDense;
  int64_t ff = 0;  // the dense MLP's width, or one routed expert's
  int64_t n_expert = 0, n_used = 0;
  int64_t shared_ff = 0;  // the shared expert's width (0: none)
  bool operator==(const LayerFfn&) const = default;
};

// A layer's weight elements by how they split (from the tensor specs: describe_layers).
struct LayerWeights {
  int64_t split = 0;       // split over tp (column- and row-parallel projections)
  int64_t replicated = 0;  // held whole by every tp rank (norms, routers, indexers, replicated latents)
  int64_t experts = 0;     // routed experts, all of them: split over ep (and each expert over etp)
  bool operator==(const LayerWeights&) const = default;
};

struct LayerDesc {
  MixerKind mixer = MixerKind::kAttention;
  LayerCache cache;
  LayerFfn ffn;
  // Why a pipeline stage may not start at this layer: it reads what the layer before it
  // computed in the same forward call ("reuses the previous layer's DSA top-k"). Empty: it may.
  std::string stays_with_previous;
  bool stage_start() const { return stays_with_previous.empty(); }
  LayerWeights weights;
  bool operator==(const LayerDesc&) const = default;
};

// "MLA + sparse indexer, 8 of 256 experts (2048) + shared 2048": one line for reports.
std::string describe(const LayerDesc& d);

// Runs of equal layers (ignoring the weights' exact counts): [first, end) and the descriptor.
struct LayerRun {
  int first = 0, end = 0;
  LayerDesc desc;
};
std::vector<LayerRun> layer_runs(const std::vector<LayerDesc>& layers);

// Layers grouped by describe(), in order of first appearance: "MLA, dense MLP 18432: layers
// 0-2", "MLA, 8 of 256 experts (2048) + shared 2048: layers 3-60" (a group of more than four
// runs gives its count only: "39 layers").
std::vector<std::string> summarize_layers(const std::vector<LayerDesc>& layers);

// Fills each layer's weights from the specs (spec.layer in [0, layers.size()); skip_load specs
// and kQuantScale storage do not count).
void count_layer_weights(const std::vector<TensorSpec>& specs, std::vector<LayerDesc>& layers);

// The sparse-attention rule shared by adapters and the generic analysis: index_topk > 0 gives
// every layer an indexer of its own, except those `shared` marks (indexer_types "shared"), which
// reuse the previous layer's selection.
bool reuses_index_selection(int64_t index_topk, const std::vector<bool>& shared, int64_t layer);

}  // namespace dayzero::model
