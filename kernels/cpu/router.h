// MoE router top-k on host buffers: softmax top-k (Mixtral, Qwen3-MoE) and sigmoid with a
// score-correction bias and group-limited top-k (DeepSeek-V3, Kimi-K2, GLM). The reference
// for the CUDA kernels of kernels/cuda/router.cu. Not the experts (model/blocks/moe.cpp).
//
// Tie rule (both kinds, both backends): experts (and groups) are taken in descending score;
// equal scores go to the lower index. Ids come out in that order. NaN scores have no defined
// place in the order.
#pragma once

#include <cstdint>

namespace dayzero::kernels::cpu {

// ids int32 [n_tokens, k], weights f32 [n_tokens, k] from logits [n_tokens, n_expert]:
// p = softmax(logits) (f32, max subtracted, the sum in expert order); the k largest p;
// weights p, or p / (sum of the k chosen p, in selection order) when renormalize.
// REQUIRES: 1 <= k <= n_expert.
void route_softmax_topk(int64_t n_tokens, int64_t n_expert, int64_t k, bool renormalize, const float* logits,
                        int32_t* ids, float* weights);

struct GroupRoute {
  int64_t n_group = 1, topk_group = 1;  // n_expert % n_group == 0
  bool renormalize = true;
  float scaling = 1.0f;  // routed_scaling_factor
};

// s = sigmoid(logits) [n_tokens, n_expert], c = s + bias (bias [n_expert], may be null);
// group score = the sum of a group's two largest c (its largest if it has one expert); the
// topk_group best groups are kept; the k largest c among their experts are chosen; weights
// s (unbiased), divided by (their sum in selection order + 1e-20) when renormalize, times
// scaling. REQUIRES: 1 <= topk_group <= n_group, k <= topk_group * (n_expert / n_group).
void route_sigmoid_group_topk(int64_t n_tokens, int64_t n_expert, int64_t k, const GroupRoute& o, const float* logits,
                              const float* bias, int32_t* ids, float* weights);

}  // namespace dayzero::kernels::cpu
