// Layer descriptors of a model without an adapter, from its dims (analysis.h describe_layers).
#include <algorithm>
#include <numeric>

#include "analysis/analysis.h"

namespace dayzero::analysis {

std::vector<model::LayerDesc> describe_layers(const TextDims& t) {
  using model::MixerKind;
  std::vector<model::LayerDesc> out(static_cast<size_t>(std::max<int64_t>(0, t.n_layer)));
  const int64_t groups = t.lin_k_heads > 0 && t.lin_v_heads > 0 ? std::gcd(t.lin_k_heads, t.lin_v_heads) : 0;
  for (int64_t l = 0; l < t.n_layer; ++l) {
    model::LayerDesc& d = out[l];
    model::LayerCache& c = d.cache;
    if (t.is_linear_layer(l) && groups > 0) {
      d.mixer = MixerKind::kLinearAttention;
      c.state_heads = groups;
      c.conv_rows = std::max<int64_t>(0, t.lin_conv - 1);
      c.conv_per_head = (2 * t.lin_k_heads * t.lin_k_dim + t.lin_v_heads * t.lin_v_dim) / groups;
      c.v_per_head = t.lin_v_heads / groups;
      c.k_dim = t.lin_k_dim;
      c.v_dim = t.lin_v_dim;
    } else if (t.is_linear_layer(l) && t.kda_heads > 0 && t.kda_head_dim > 0) {
      // Kimi Delta Attention: per head a k x v recurrent state of its head width and the
      // short convolution's window over its q, k and v channels.
      d.mixer = MixerKind::kLinearAttention;
      c.state_heads = t.kda_heads;
      c.conv_rows = std::max<int64_t>(0, t.lin_conv - 1);
      c.conv_per_head = 3 * t.kda_head_dim;
      c.v_per_head = 1;
      c.k_dim = t.kda_head_dim;
      c.v_dim = t.kda_head_dim;
    } else if (t.kv_lora > 0) {
      d.mixer = t.index_topk > 0 ? MixerKind::kSparseMla : MixerKind::kMla;
      c.latent_dim = t.kv_lora + t.qk_rope;
      c.index_dim = t.has_indexer(l) ? t.index_head_dim : 0;
      if (l > 0 && model::reuses_index_selection(t.index_topk, t.index_shared, l))
        d.stays_with_previous = "reuses the previous layer's DSA top-k";
    } else {
      c.kv_heads = t.n_head_kv;
      c.head_dim = t.head_dim;
      // DeepSeek-V4 keeps a window on every layer (its compressed entries are not described).
      if (t.is_sliding_layer(l) || (t.o_groups > 0 && t.sliding_window > 0)) c.window = t.sliding_window;
    }
    // A shared expert: n_shared_experts of the routed width (DeepSeek), or its own width (Qwen).
    const int64_t shared_ff = t.n_shared > 0 ? t.n_shared * t.moe_ff : t.shared_ff;
    if (t.is_moe_layer(l)) d.ffn = {model::FfnKind::kExperts, t.moe_ff, t.n_expert, t.top_k, shared_ff};
    else d.ffn = {model::FfnKind::kDense, t.ff, 0, 0, 0};
  }
  return out;
}

}  // namespace dayzero::analysis
