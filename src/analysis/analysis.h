// Family-independent static analysis of a model: config.json (nested text/vision configs and
// the keys families spell differently) plus, when present, the safetensors headers or the
// index's tensor names. Groups tensors into layer templates, detects components and features,
// counts parameters from real shapes (or estimates them from the config, and says so) and gives
// each feature a support status. Needs no adapter; never reads tensor bytes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "analysis/defaults.h"
#include "analysis/keys.h"
#include "analysis/modeling_scan.h"
#include "analysis/python_source.h"
#include "checkpoint/catalog.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/inspect.h"
#include "model/layer_desc.h"
#include "model/tensor_spec.h"

namespace dayzero::analysis {

// The text decoder's sizes, read from config.json or its text_config (keys as each family
// spells them; defaults of the nested model_type where a published config omits them).
struct TextDims {
  std::string model_type;
  int64_t vocab = 0, hidden = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, ff = 0;
  bool tie_embeddings = false, attn_qkv_bias = false, attn_o_bias = false, attn_output_gate = false, qk_norm = false;
  bool mlp_bias = false;
  // Layout traits the config keys do not state (layouts.cpp, from each family's modeling code):
  // a two-matrix MLP (up, act, down) instead of the gated three; LayerNorm with a bias for every
  // norm; a norm on the word embeddings (bloom); norms before and after the feed-forward as well
  // (gemma2/3); q/k norms without weights (llama4's L2 norm).
  bool gated_mlp = true, norm_bias = false, embed_norm = false, sandwich_norms = false;
  bool single_norm = false;       // one norm before the parallel attention and MLP (falcon-7b)
  bool lm_head_bias = false;      // lm_head_bias (phimoe)
  bool mtp_own_embedding = true;  // a DeepSeek-style MTP layer keeps its own embedding and head
                                  // (MiMo's shares the model's: input_proj and three norms only)
  // gpt-oss: attention sinks, a router with a bias (mlp.router.*), fused experts with biases
  // (mlp.experts.gate_up_proj / down_proj and their _bias).
  bool attn_sinks = false, router_bias = false, fused_expert_bias = false;
  // MoE (n_expert 0: dense)
  int64_t n_expert = 0, top_k = 0, moe_ff = 0, n_shared = 0, shared_ff = 0;
  int64_t first_dense = 0, moe_freq = 1;  // first_k_dense_replace, moe_layer_freq / decoder_sparse_step /
                                          // interleave_moe_layer_step (MoE on layers l with (l + 1) % freq == 0)
  std::vector<int64_t> dense_layers;      // mlp_only_layers
  std::vector<std::string> mlp_layer_types;  // [n_layer] or empty: "dense", or MoE ("sparse", "moe", "hash_moe")
  std::string act;                        // hidden_act / hidden_activation ("" not stated by the file or its class)
  std::string scoring;                    // scoring_func ("" not stated by the file or its class)
  std::string topk_method;
  // MLA (kv_lora 0: none)
  int64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  // Sparse-attention indexer (index_topk 0: none)
  int64_t index_topk = 0, index_heads = 0, index_head_dim = 0;
  std::vector<bool> index_shared;  // [n_layer] or empty: true reuses the previous top-k (no indexer)
  // Hybrid layers: layer_types, and the linear-attention (Gated DeltaNet) sizes
  std::vector<std::string> layer_types;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, lin_conv = 0;
  // Kimi Delta Attention (linear_num_heads / linear_head_dim; kda_heads 0: none): its linear layers
  // are KimiLinearDeltaAttention's q/k/v, short convolution, forget gate, beta, output gate and norm.
  int64_t kda_heads = 0, kda_head_dim = 0;
  // DeepSeek-V4 (o_groups 0: none): attention of one shared KV head (q low-rank, kv_proj), a
  // grouped low-rank output (o_a_proj per group, o_b_proj), per-head sinks; layer kinds
  // compressed_sparse_attention (a KV compressor of rate csa_rate with an indexer) and
  // heavily_compressed_attention (a compressor of rate hca_rate); hc_mult residual streams mixed by
  // two hyper-connections a layer and one before the final norm (hc_mult 0: none).
  int64_t o_groups = 0, o_lora = 0, csa_rate = 0, hca_rate = 0, hc_mult = 0;
  int64_t sliding_window = 0;
  // RoPE
  std::string rope_type = "default";
  double rope_factor = 1.0, partial_rotary = 1.0;
  bool mrope = false;
  // Multi-token prediction
  int64_t n_mtp = 0;
  bool mtp_qwen_style = false;  // mtp_num_hidden_layers (mtp.* tensors) vs num_nextn_predict_layers
  int64_t max_position = 0;

  bool is_moe_layer(int64_t l) const;
  bool is_linear_layer(int64_t l) const;
  bool is_sliding_layer(int64_t l) const;
  // "csa", "hca" or "" (DeepSeek-V4's compressed layer kinds, known only with their compress_rates).
  std::string compressed_kind(int64_t l) const;
  bool has_indexer(int64_t l) const;
};

struct VisionDims {
  std::string model_type, style;  // style: "clip" (vision_tower.vision_model.*) or "vit" (model.visual.*)
  int64_t hidden = 0, ff = 0, n_layer = 0, n_head = 0, patch = 0, channels = 3, image = 0, temporal = 1,
          merge = 1, out_hidden = 0, n_pos = 0;
  // CLIP has a class token and a norm before the encoder, a patch convolution without bias;
  // SigLIP has neither, and a bias on the patch convolution; Qwen2-VL's ViT has no bias there.
  bool class_token = true, pre_norm = true, patch_bias = false;
  // The projector to the text model: "llava" (linear_1, GELU, linear_2, with biases), "gemma3"
  // (an RMSNorm of the tower's width and one matrix [tower, text]), "llama4" (one matrix
  // [text, vision_output_dim] without bias, after the tower's pixel-shuffle adapter: fc1
  // [adapter_in, ff], fc2 [adapter_out, adapter_out], no biases), "merger" (the ViT's own).
  std::string projector = "llava";
  int64_t proj_in = 0, adapter_in = 0, adapter_out = 0;
};

struct ModelDims {
  std::string model_type, architecture, torch_dtype;
  TextDims text;
  std::optional<VisionDims> vision;
  bool has_audio = false;
  std::string quant_method, quant_detail;  // quantization_config
  int64_t quant_block_rows = 0, quant_block_cols = 0;  // weight_block_size (FP8 block scales)
  // compressed-tensors "pack-quantized" integer weights (quant_bits 0: none): each quantized
  // Linear X is stored as X.weight_packed int32 [out, in * bits / 32], X.weight_scale
  // [out, in / group] (bf16) and X.weight_shape int32 [2]; the `ignore` entries (module names,
  // or "re:" regular expressions) stay unquantized.
  int64_t quant_bits = 0, quant_group = 0;
  std::vector<std::string> quant_ignore;
  // MXFP4 (quant_method "mxfp4", as gpt-oss ships it): the fused routed experts of each MoE
  // layer not matched by modules_to_not_convert (kept in quant_ignore) are stored as
  // X_blocks uint8 [E, out, in / 32, 16] (two e2m1 values a byte, 32 a block), X_scales uint8
  // [E, out, in / 32] (one e8m0 exponent a block) and X_bias bf16 [E, out], X in gate_up_proj
  // (out = 2 x moe_ff, gate and up rows interleaved) and down_proj (out = hidden).
  bool mxfp4 = false;
  bool nested_text = false;                // sizes came from text_config
  // Where each key the analysis read came from (defaults.h): config.json, the folder's
  // configuration_*.py, transformers' class defaults, a derived rule, or the analysis's guess.
  KeyOrigins origins;
  std::string text_class;                  // the transformers config class of the text model ("" unknown)
  std::vector<std::string> risks;          // defaults the folder's code gives but could not be read
};

// A model folder's own Python (remote code): its configuration_*.py and modeling_*.py.
struct FolderCode {
  std::vector<PyConfigFile> configs;
  std::vector<ModelingScan> modeling;
};
// Reads folder/configuration_*.py and folder/modeling_*.py (none: empty). Errors name the file.
Result<FolderCode> read_folder_code(const std::string& folder);
// Adds the modeling code at path (a modeling_*.py file, or a folder such as transformers'
// models/<family>/ whose modeling_*.py files are read) to code. Errors name the path (NotFound
// when absent, InvalidArgument when a folder has no modeling_*.py or a file is not Python).
Status read_modeling_path(const std::string& path, FolderCode& code);

// The layout traits of the text model_type that its config keys do not state (layouts.cpp):
// sets them in x and records the sizes it derives in origins. Errors name a mistyped key.
Status apply_layout(const nlohmann::json& t, TextDims& x, KeyOrigins& origins);

// Errors: InvalidArgument naming the key when a size has the wrong type or the text sizes are
// missing (hidden_size, num_hidden_layers, num_attention_heads, vocab_size with no default).
// Keys config.json leaves out are taken from code's classes, then transformers' (defaults.h).
Result<ModelDims> read_dims(const nlohmann::json& config, const FolderCode* code = nullptr);

struct TensorInfo {
  std::string name;
  Shape shape;
  std::string dtype;  // safetensors name ("BF16"); from the config when not from headers
  uint64_t bytes = 0;
};

enum class Source { kHeaders, kIndexNames, kConfig };
const char* source_name(Source s);  // "safetensors headers", "index names + config shapes", "config estimate"

// The tensors a model of these dims has, named as Hugging Face does: the config estimate.
std::vector<TensorInfo> synthesize_tensors(const ModelDims& d);
// The shape of a tensor from its name and the dims (nullopt: no rule knows the name).
std::optional<Shape> shape_from_name(const std::string& name, const ModelDims& d);

// Whether a decoder Linear weight (".weight" name) is stored pack-quantized: quant_bits > 0,
// a 2-D Linear of a text decoder layer other than the router, not matched by quant_ignore.
bool is_pack_quantized(const std::string& weight_name, const ModelDims& d);
// Whether the routed experts of decoder layer `layer` are stored MXFP4 (d.mxfp4 and the module
// model.layers.{layer}.mlp.experts not matched by modules_to_not_convert, as transformers
// matches them: a regular expression from the start up to a module boundary, or a suffix).
bool is_mxfp4_experts(int64_t layer, const ModelDims& d);
// Parameters a tensor holds: its elements, times 32 / quant_bits for an int32 weight_packed,
// times 2 for MXFP4 _blocks (two e2m1 values a byte).
int64_t tensor_params(const std::string& name, const Shape& shape, const ModelDims& d);

// What a tensor is: component (as model::inspect counts), the finer part ("MLA latent",
// "indexer", "linear attention", "projector", ...) and its layer (-1 outside layers).
struct Classified {
  model::Component component = model::Component::kUnknown;
  std::string part;
  int64_t layer = -1;
  bool mtp = false;
};
Classified classify(const std::string& name, const ModelDims& d);
// "model.layers.{L}.mlp.experts.{E}.up_proj.weight" of "model.layers.3.mlp.experts.7.up_proj.weight".
std::string name_template(const std::string& name);

struct Group {  // one layer-template name with the tensors that expand it
  std::string tmpl, part;
  model::Component component = model::Component::kUnknown;
  int64_t tensors = 0, params = 0;
  uint64_t bytes = 0;
};

// kBlock: a proof (evidence.h) says an adapter runs the feature's block under a test; kReview:
// seen, but nothing here runs it under a test (or the analysis does not know the value).
enum class FeatureStatus { kBlock, kAdapter, kNewBlock, kSkipped, kUnknown, kReview };
const char* feature_status_name(FeatureStatus s);

struct Finding {
  std::string name, detail, evidence;  // evidence: the config key or tensor pattern
  FeatureStatus status = FeatureStatus::kBlock;
  std::string block;  // kBlock: the block; kAdapter: the family; kNewBlock: what is missing;
                      // kReview: the block that would run it, if any, and why it is not proven
  std::string key;    // the feature key the proof table is searched for
  std::string proof;  // kBlock: "adapter ADAPTER, test TEST"
};

// What a part's count rests on: "exact" (safetensors headers), "index" (index names, shapes
// from the config), "config keys", "defaults" (folder or transformers), "derived" or "guessed"
// (the weakest of its keys), with the keys that are not plain config keys named.
struct Basis {
  std::string kind, detail;
};

struct Analysis {
  ModelDims dims;
  Source source = Source::kConfig;
  std::string adapter;                  // the registered adapter of this config, "" when none
  std::vector<TensorInfo> tensors;
  std::vector<Group> groups;            // sorted by template
  model::ComponentParams main, mtp;     // parameters as model::inspect_params counts them
  std::map<std::string, int64_t> parts; // finer breakdown (main and MTP)
  int64_t total = 0, mtp_total = 0, activated = 0, n_moe_layers = 0;
  int64_t scale_tensors = 0, unknown_tensors = 0;
  uint64_t weight_bytes = 0, unknown_bytes = 0, index_total_size = 0;  // index metadata.total_size (0: none)
  std::vector<Finding> features;
  std::vector<std::string> precision;   // precision-sensitive points
  std::vector<std::string> notes;       // what rests on estimates
  std::map<std::string, Basis> basis;   // part -> what its count rests on
  // The risk register: figures that may be wrong and why (defaults not read, index and estimate
  // disagreeing, code that needs a new op, a transformers_version newer than the defaults table).
  std::vector<std::string> risks;
  std::string transformers_version;     // config.json's
  std::vector<std::string> auto_map;    // "AutoConfig -> configuration_x.XConfig", ...
  std::vector<ModelingScan> modeling;   // the folder's modeling_*.py (and --modeling's)
  std::vector<KeyAccount> keys;         // every config.json key: understood, irrelevant or unrecognised
  std::string closest;                  // "closest: F (runs ...); differs in: ..." (no adapter), "" else
};

// What each decoder layer is ([n_layer], model/layer_desc.h), from the dims alone (weights not
// counted): the mixer by attention kind (linear attention from layer_types, MLA when kv_lora >
// 0, sparse MLA with an indexer), the cache it keeps (full attention k and v of n_head_kv x
// head_dim; sliding-window layers the same bounded by sliding_window; MLA the latent
// kv_lora + qk_rope held whole, plus index_head_dim for a layer with its own indexer; linear
// attention a state of gcd(k heads, v heads) head groups, each with the conv window (kernel -
// 1) x its conv channels and its value heads' k_dim x v_dim recurrent state), the FFN and the
// stage starts (a layer reusing the previous indexer selection stays with it).
std::vector<model::LayerDesc> describe_layers(const TextDims& t);

// Analyses config (already parsed) with the given tensors (empty with kConfig: synthesized).
// code: the folder's own Python, when there is a folder.
Result<Analysis> analyze(const nlohmann::json& config, std::vector<TensorInfo> tensors, Source source,
                         const FolderCode* code = nullptr);

// The basis of each part's count and the register lines of the folder's code, its
// transformers_version and auto_map (provenance.cpp; called by analyze).
void add_provenance(Analysis& a, const nlohmann::json& config, const FolderCode* code);
// An analysis from model.safetensors.index.json's names: its metadata.total_size against the
// analysis's bytes, and its tensor-name groups against the config estimate's. A difference over
// 2 %, or groups one side has and the other lacks, is a register line with both figures.
void cross_check_index(Analysis& a, const nlohmann::json& config, const FolderCode* code);

// path: a model folder or a config.json. Reads config.json; takes the tensors from the
// safetensors headers when the shards are there, else the index's names with shapes from the
// config, else the config estimate. Errors name the file (exit 2). opened: the folder's catalog
// when the caller has opened it already (its headers are then not read a second time).
// modeling: a modeling file or folder to read besides the folder's own ("" none).
Result<Analysis> analyze_path(const std::string& path, const checkpoint::Catalog* opened = nullptr,
                              const std::string& modeling = "");

nlohmann::json to_json(const Analysis& a);
void print_text(std::ostream& o, const Analysis& a);
void print_features(std::ostream& o, const Analysis& a);
// Each part's basis, the defaults table used, auto_map, the folder's code and the risk register.
void print_provenance(std::ostream& o, const Analysis& a);

}  // namespace dayzero::analysis
