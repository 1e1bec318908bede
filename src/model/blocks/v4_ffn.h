// DeepSeek-V4's FFN (transformers' DeepseekV4Experts and DeepseekV4MLP): routed experts and the
// shared expert, each a SwiGLU whose gate is clamped above at swiglu_limit and whose up is
// clamped to [-swiglu_limit, swiglu_limit] before silu(gate) * up. Host arrays in f32, plain
// loops; the experts' choice is blocks/v4_routing. The host reference of the runtime's path
// (moe_experts and swiglu_mlp with hp.swiglu_limit), used by tests/unit/model/v4_model_test.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/blocks/moe.h"

namespace dayzero::model::blocks {

struct V4FfnWeights {
  std::span<const float> w1, w3, w2;  // gate [ff, d], up [ff, d], down [d, ff]
};

// out [n, d] = sum over each row's chosen experts of weight x expert(x) + shared(x), for x [n, d].
// expert(e) gives routed expert e's weights (ff = n_ff_expert); shared's ff = its own width.
// limit 0: no clamp. REQUIRES: spans of the sizes stated; r of n rows x n_used.
void v4_ffn(std::span<const float> x, int64_t n, int64_t d, const Routing& r, int64_t n_used,
            const std::function<V4FfnWeights(int)>& expert, int64_t ff, const V4FfnWeights& shared, int64_t shared_ff,
            float limit, std::span<float> out);

}  // namespace dayzero::model::blocks
