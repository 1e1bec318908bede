// The shared vision-tower core: patch embedding as a GEMM over unfolded patches, optional class
// token, absolute position embeddings, pre-norm encoder layers (LayerNorm, fused or separate qkv
// with bias, GELU-family MLP), a k x k patch merger, the projector into the text width, and the
// placement of image features at the placeholder rows of the text embeddings. A family picks
// its parts (VisionParams) and its tensor names (VisionNames); there is no per-family branch.
// Not here: image decoding and preprocessing (src/image/), the text model.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "image/processed_image.h"
#include "model/activation_sink.h"
#include "model/hparams.h"
#include "model/tensor_spec.h"
#include "model/weights.h"

namespace dayzero::backend {
class Backend;
}

namespace dayzero::model::blocks {

// Tensor names of a tower; layer templates carry {L}. An empty name is a part the family lacks.
struct VisionNames {
  std::string patch_w, patch_b;   // conv [n_embd, C, p, p] (+ [n_embd])
  std::string class_embedding;    // [n_embd]
  std::string pos_embedding;      // [n_pos, n_embd]: (class token +) pos_h * pos_w rows
  std::string pre_norm_w, pre_norm_b;
  std::string ln1_w, ln1_b, ln2_w, ln2_b;            // per layer [n_embd]
  std::string q_w, q_b, k_w, k_b, v_w, v_b, qkv_w, qkv_b, o_w, o_b;
  std::string fc1_w, fc1_b, fc2_w, fc2_b;
  std::string post_norm_w, post_norm_b;              // run only with vp.post_norm (else declared, skipped)
  std::string proj_norm_w, proj_norm_b;              // projector pre-norm [n_embd], per patch (MoonViT's patchmerger)
  std::string proj1_w, proj1_b, proj2_w, proj2_b;    // projector linears
};

// Every tensor the tower and projector hold (component kVision, layer -1: the first pipeline
// stage holds them, replicated over tp). Layers at and after vp.n_layer_run and the post-norm
// (unless vp.post_norm) are declared skip_load: claimed by the checkpoint check, never read.
// n_text_embd: the projector's output width.
std::vector<TensorSpec> vision_specs(const VisionParams& vp, const VisionNames& n, int64_t n_text_embd);

// The number of text positions one image becomes: its (merged) patches, minus the class token
// when the family drops it.
int64_t image_feature_count(const VisionParams& vp, const image::ProcessedImage& img);

// Rows of im2col for a conv with stride = kernel = p: patches [grid_h * grid_w, C * p * p], row
// r = (r / grid_w, r % grid_w), columns in the conv weight's (c, ky, kx) order.
// REQUIRES: img.pixels is [C, grid_h * p, grid_w * p].
std::vector<float> unfold_patches(const image::ProcessedImage& img, int64_t n_channels, int64_t patch);

// A learned position table [th, tw, d] resampled to [oh, ow, d] as torch's
// F.interpolate(mode="bicubic", align_corners=False) does (A = -0.75, borders clamped, no
// antialias): MoonViT's Learnable2DInterpPosEmb for a grid other than its table's.
std::vector<float> resample_bicubic(const float* table, int64_t th, int64_t tw, int64_t d, int64_t oh, int64_t ow);

// 2-D rotary embedding with width and height interleaved per frequency (MoonViT's
// Rope2DPosEmb): x [grid_h * grid_w, n_head, head_dim] rotated in place, token r at
// (r / grid_w, r % grid_w); complex pair j = (x[2j], x[2j+1]) turns by (j even ? col : row) *
// theta^(-4 (j / 2) / head_dim). REQUIRES: head_dim % 4 == 0.
void rope_2d_interleaved(float* x, int64_t grid_h, int64_t grid_w, int64_t n_head, int64_t head_dim, double theta);

struct VisionContext {
  backend::Backend& be;
  const VisionParams& vp;
  const VisionNames& names;
  const Weights& w;
  ActivationSink* sink;  // may be null
  int64_t grid_h = 0, grid_w = 0;  // the image's patch grid (vision_tower sets it for 2-D RoPE)
};

// The tower up to its feature layer: embed (patches, class token, positions, pre-norm) and
// vp.n_layer_run encoder layers, then the post-norm with vp.post_norm. Returns [n_tokens, n_embd]
// (n_tokens = class + patches).
// Dumps vision.embed and vision.layers.{L}.layer_out.
Tensor vision_tower(const VisionContext& ctx, const image::ProcessedImage& img);

// One pre-norm encoder layer: h += attn(ln1(h)); h += mlp(ln2(h)). hidden [n_tokens, n_embd].
void vision_encoder_layer(const VisionContext& ctx, int layer, Tensor& hidden);

// Bidirectional multi-head self-attention of one image's tokens (vision_attention.cpp):
// x [n_tokens, n_embd] normalised; returns [n_tokens, n_embd] after the output projection.
Tensor vision_attention(const VisionContext& ctx, int layer, const Tensor& x);

// k x k merger: x [gh * gw, d] -> [(gh / k) * (gw / k), k * k * d], each output row the k x k
// block's rows in (dy, dx) order. REQUIRES: k divides gh and gw.
Tensor merge_patches(backend::Backend& be, const Tensor& x, int64_t gh, int64_t gw, int64_t k);

// The image's features in the text width: tower, selection (drop the class token), the
// projector's per-patch pre-norm, merge, projector linears. Returns [image_feature_count, n_text_embd]; dumps vision.selected and projector_out.
Tensor image_features(const VisionContext& ctx, const image::ProcessedImage& img);

// Copies features[i] (each [n_i, d]) into the rows of hidden [n_tokens, d] whose token id is
// the placeholder, in order. Returns InvalidArgument when the count of placeholder rows is not
// the sum of n_i (the prompt was not expanded for these images).
Status place_image_features(backend::Backend& be, std::span<const int32_t> tokens, int32_t image_token,
                            std::span<const Tensor> features, Tensor& hidden);

// The prompt ids with each placeholder expanded to counts[i] copies (as transformers'
// LlavaProcessor expands <image> in the text); with no placeholder at all the images' runs
// come first, in order, before the text (how llava's chat template places them).
// Returns InvalidArgument when there are placeholders but not one per image.
Result<std::vector<int32_t>> expand_image_placeholders(std::span<const int32_t> ids, int32_t image_token,
                                                       std::span<const int64_t> counts);

}  // namespace dayzero::model::blocks
