// Multi-head attention with grouped KV heads, RoPE (rotate-half) and a KV cache: the block of
// Llama-like families. Optional q/k/v/o biases and per-head q/k RMSNorm (qwen3) come from
// the names given; absent names mean "not in this family". Backend-agnostic.
#pragma once

#include <string>

#include "model/adapter.h"

namespace dayzero::model::blocks {

struct AttentionNames {
  std::string q, k, v, o;                  // Linear weights: [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  std::string q_bias, k_bias, v_bias, o_bias;  // empty when absent
  std::string q_norm, k_norm;              // [head_dim] each, empty when absent (1 + w under hp.norm_weight_offset)
  // q_proj yields per head [q (head_dim) | gate (head_dim)] ([n_head * 2 hd, n_embd]); the attention
  // output is multiplied by sigmoid(gate) before o_proj (qwen3_next's attn_output_gate).
  bool q_gate = false;
};

// The batch's keys and values k, v [n_rows, n_head_kv, head_dim] appended to each sequence's
// cache (ctx.segments), then q [n_rows, n_head, head_dim] of each sequence attended causally
// over its own cache only, into out [n_rows, n_head, head_dim]. Shared by GQA and MLA.
void cached_attention(LayerContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out);

// Rotate-half RoPE on the leading hp.rope_dim of each head of x [n, heads, head_dim] (all of it
// when rope_dim is 0 or head_dim: partial_rotary_factor), the rest passed through.
void rope_heads(LayerContext& ctx, Tensor& x);

// Returns the attention output [n_tokens, n_embd] (after o_proj) for x [n_tokens, n_embd]
// (already normalised); appends each segment's keys and values to that sequence's cache of the
// layer and attends over it (ctx.segments). REQUIRES: the segments tile the rows of x.
Tensor attention(LayerContext& ctx, const AttentionNames& names, const Tensor& x);

}  // namespace dayzero::model::blocks
