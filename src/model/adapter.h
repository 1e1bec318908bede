// Adapter: everything one model family knows, in one file per family (adapters/<family>.cpp):
// how to read its config.json, which tensors it expects with which shapes and shard rules,
// how one decoder layer is composed from model/blocks, and what config.json a generated
// model of the family carries. Adapters are stateless; the registry hands out one per family.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/processed_image.h"
#include "model/activation_sink.h"
#include "model/hparams.h"
#include "model/layer_desc.h"
#include "model/tensor_spec.h"
#include "model/weights.h"

namespace dayzero::backend {
class Backend;
}

namespace dayzero::model {

// A layer's per-sequence state that is neither keys and values nor a linear-attention state: an
// adapter's own (DeepSeek-V4: the window's K=V entries, the compressors' tails and entries, the
// indexer's keys). Made by Adapter::new_layer_state; the runtime only holds it and hands it to
// forward_layer in SeqSegment.
struct LayerState {
  virtual ~LayerState() = default;
  // Bytes it reserves for a context of the n_ctx it was made for (counted in the KV ledger).
  virtual int64_t bytes() const = 0;
};

// One sequence's share of a forward call: a contiguous range of the batch's rows and this
// layer's cache of that sequence. Prefill is one segment of n tokens; batched decode is one
// segment of one token per live sequence. Row-wise blocks (norms, MLP, MoE) never look at
// segments; attention appends each segment's keys and values to its own cache and attends
// over that cache only.
struct SeqSegment {
  Tensor* k_cache = nullptr;  // [n_ctx, n_head_kv, head_dim] of this layer and sequence
  Tensor* v_cache = nullptr;  // [n_ctx, n_head_kv, head_dim]
  Tensor* index_k_cache = nullptr;  // [n_ctx, index_head_dim]: DSA indexer keys; null without an indexer
  // A linear-attention layer's fixed-size state of this sequence (null for other layers): the
  // causal conv's last conv_kernel - 1 inputs [conv_kernel - 1, local conv channels], the
  // delta-rule state [local v heads, k_head_dim, v_head_dim] (f32), and the positions they cover
  // (the block checks pos0 against it: a segment at pos0 0 starts from zero state).
  Tensor* conv_state = nullptr;
  Tensor* recurrent_state = nullptr;
  int64_t* state_pos = nullptr;
  LayerState* layer_state = nullptr;  // the adapter's own state of this layer (null: none)
  int64_t pos0 = 0;           // position of the segment's first row in its sequence
  int64_t row0 = 0;           // first row of the segment in the batch
  int64_t n_rows = 0;         // rows (tokens) of the segment
};

// Wide expert parallelism (plan ep_dp > 1): the expert group a MoE layer dispatches its tokens
// over. Every rank of the group holds the same rows; rank `rank` sends rows [rank * n / size,
// (rank + 1) * n / size) to their experts' owners (block e of n_expert / size experts on group
// rank e) and gathers the combined rows of all. Collective over the group.
struct ExpertGroup {
  int rank = 0, size = 1;
  // Comm::all_to_allv over the group (comm/comm.h); op "dispatch" or "combine".
  std::function<void(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                     std::span<const int64_t> recv_rows, const char* op)>
      all_to_all;
  // Comm::all_gather over the group: [m, ...] -> [size * m, ...].
  std::function<void(const Tensor& in, Tensor& out)> all_gather;
  // debug.reverse_combine (tests only): each expert rank's results are applied in reverse
  // order, to the wrong tokens; the negative control of the partition tests.
  bool reverse_combine = false;
};

// What one decoder layer needs from the forward pass.
struct LayerContext {
  backend::Backend& be;
  const HParams& hp;
  const Weights& w;
  // The batch's sequences in row order; they tile [0, n_tokens) without gaps.
  std::span<const SeqSegment> segments;
  const Tensor& positions;   // int32 [n_tokens], per row (each row's position in its sequence)
  const Tensor& token_ids;   // int32 [n_tokens] on the host: each row's token (hash-routed experts)
  const Tensor& inv_freq;    // f32 [head_dim / 2]
  ActivationSink* sink;      // may be null
  // Sums a row-parallel partial result over the tensor-parallel group (absent: tp = 1).
  // Collective over the tp group: every tp rank of the stage calls it in the same order.
  const std::function<void(Tensor&)>* tp_all_reduce = nullptr;
  // Routed tokens per [layer][expert] (MoE layers add to it; may be null).
  std::vector<std::vector<int64_t>>* expert_tokens = nullptr;
  // DSA: the keys the last indexer of this forward call on this stage selected, per row (a
  // layer that reuses the previous selection reads it; may be null).
  std::vector<std::vector<int32_t>>* dsa_keys = nullptr;
  // This rank's index in the tp group and its size (a block that splits heads checks its share
  // of them, as Gated DeltaNet does).
  int tp_rank = 0, tp_size = 1;
  // Wide expert parallelism: the expert group (null: every rank routes all tokens and the
  // experts' partial outputs are summed over the tp group).
  const ExpertGroup* expert_group = nullptr;

  void reduce_tp(Tensor& t) const {
    if (tp_all_reduce) (*tp_all_reduce)(t);
  }
  // The same context reading its weights through other (a multimodal adapter's text model under
  // its prefix view); every other field carries over.
  LayerContext with_weights(const Weights& other) const {
    return {be,           hp,       other,   segments, positions, token_ids, inv_freq, sink, tp_all_reduce,
            expert_tokens, dsa_keys, tp_rank,  tp_size, expert_group};
  }
};

// Sizes for a generated model (make-model).
struct ModelShape {
  int64_t n_vocab = 512, n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 0, n_ff = 128;
  int64_t max_position = 2048;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0;  // MoE families
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  int32_t bos_id = -1, eos_id = -1;
  std::string torch_dtype = "bfloat16";
  // "" / "int4": the family's INT4 layout (make_config writes its quantization_config); "fp8"
  // (--dtype fp8): make_config may write the family's own FP8 quantization_config, else
  // make-model writes DeepSeek-V3's.
  std::string quant = {};
  int32_t image_token_id = -1;  // the tokenizer's image placeholder (image_placeholder_text), -1: none
};

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual const char* family() const = 0;
  // HF architecture names this adapter serves (architectures[0] in config.json).
  virtual std::vector<std::string> architectures() const = 0;

  virtual Result<HParams> parse_hparams(const nlohmann::json& config) const = 0;
  virtual std::vector<TensorSpec> tensor_specs(const HParams& hp) const = 0;

  virtual std::string embed_name() const { return "model.embed_tokens.weight"; }
  virtual std::string final_norm_name() const { return "model.norm.weight"; }
  virtual std::string lm_head_name(const HParams& hp) const {
    return hp.tie_embeddings ? embed_name() : "lm_head.weight";
  }

  // What each decoder layer is ([n_layer]; model/layer_desc.h), its weights not counted
  // (describe_layers does). The planner, the memory model, the KV cache, the analysis and
  // `plan`'s report read these, never the family's hyper-parameters. The default: softmax
  // attention with n_head_kv heads of head_dim cached, the FFN of is_moe_layer (n_expert routed
  // experts of n_ff_expert, else a dense MLP of n_ff), every layer a possible stage start.
  virtual std::vector<LayerDesc> layer_kinds(const HParams& hp) const;

  // Whether this build's forward pass runs the family with these hyper-parameters: Ok, or
  // Unsupported naming what it cannot run yet. `run` refuses the model with it before reading a
  // weight (model_folder.h); `inspect` and `plan` do not ask.
  virtual Status forward_support(const HParams& hp) const { return Status::Ok(); }

  // hidden [n_tokens, residual_width] is updated in place to the layer's output.
  virtual void forward_layer(LayerContext& ctx, int layer, Tensor& hidden) const = 0;

  // The residual state a token carries between layers (what pipeline stages pass, replay takes
  // and layer_out dumps): n_embd, or DeepSeek-V4's hc_mult streams of n_embd. A family whose
  // width differs turns the embedded rows [n, n_embd] into it (enter_residual, first stage) and
  // collapses it back to [n, n_embd] before the final norm (leave_residual, last stage).
  virtual int64_t residual_width(const HParams& hp) const { return hp.n_embd; }
  virtual void enter_residual(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& embedded,
                              Tensor& residual) const {
    DZ_CHECK(false, family() << " has no residual streams");
  }
  virtual void leave_residual(backend::Backend& be, const HParams& hp, const Weights& w, const Tensor& residual,
                              Tensor& out, ActivationSink* sink) const {
    DZ_CHECK(false, family() << " has no residual streams");
  }
  // This layer's own per-sequence state for a context of n_ctx tokens (null: the runtime's keys
  // and values, or linear-attention state, from the layer descriptor). A layer with a state
  // gets no keys and values from the runtime.
  virtual std::unique_ptr<LayerState> new_layer_state(const HParams& hp, int layer, int64_t n_ctx, int tp) const {
    return nullptr;
  }

  // Multimodal families (hp.vision.enabled): one image's features in the text width
  // [n_features, n_embd] (blocks::image_feature_count rows), computed on the first pipeline
  // stage from the replicated tower; dumps the vision points into sink (may be null).
  virtual Tensor image_features(backend::Backend& be, const HParams& hp, const Weights& w,
                                const image::ProcessedImage& img, ActivationSink* sink) const {
    DZ_CHECK(false, family() << " has no vision tower (image " << img.source << ")");
    return {};
  }

  // Generating models (`dayzero make-model`, src/tools, the only caller; the tests' tiny models
  // go through it). These stay in the adapter on purpose: make_config is the inverse of
  // parse_hparams, so a family's config.json keys are written and read in its one file and
  // cannot drift apart (every generated model is read back by parse_hparams when it is opened);
  // moving them out would put a second copy of the family's key names in another folder.
  //
  // config.json of a generated model with these sizes.
  virtual nlohmann::json make_config(const ModelShape& shape) const = 0;
  // preprocessor_config.json of a generated model with this config.json (null: the family
  // takes no images).
  virtual nlohmann::json make_preprocessor_config(const nlohmann::json& config) const { return nullptr; }
  // The image placeholder's text in a generated model's tokenizer (make-model adds it as a
  // special token after the trained vocabulary; empty: none).
  virtual std::string image_placeholder_text() const { return {}; }
  // Fills the sizes this family needs that shape leaves at 0 (experts of an MoE family) with
  // tiny defaults, so a generated model needs no size flags. Sizes already set are kept.
  virtual void fill_tiny_defaults(ModelShape& shape) const {}
};

// The adapter's layer_kinds with each layer's weights counted from specs (its tensor_specs(hp)).
std::vector<LayerDesc> describe_layers(const Adapter& adapter, const HParams& hp, const std::vector<TensorSpec>& specs);

}  // namespace dayzero::model
