// DeepSeek-V4's lightning indexer (transformers' DeepseekV4Indexer / DeepseekV4IndexerScorer):
// which compressed entries each query of a compressed sparse attention (CSA) layer attends to.
// Its keys are the entries of its own compressor (blocks/v4_compressor with head_dim =
// index_head_dim, coff 2); a query's score of key t is sum_h w_h relu(q_h . k_t) / sqrt(head_dim),
// with q = q_residual . wq_b^T (n_heads heads, rotated like the keys at the query's position) and
// w = x . weights_proj^T / sqrt(n_heads). A query at position p sees only entries closed by then,
// t < (p + 1) / rate; it keeps the top index_topk of those. Host arrays in f32; blocks/v4_layer
// runs it per sequence.
#pragma once

#include <cstdint>
#include <span>

namespace dayzero::model::blocks {

struct IndexerSizes {
  int64_t d = 0, q_lora = 0;            // x and q_residual widths
  int64_t n_heads = 0, head_dim = 0;    // index_n_heads, index_head_dim
  int64_t rope_dim = 0, rate = 0, topk = 0;
};

// x [n, d] and q_residual [n, q_lora] of the rows at positions pos0 .. pos0 + n - 1; keys
// [n_keys, head_dim] the indexer compressor's entries so far; wq_b [n_heads * head_dim, q_lora];
// weights_proj [n_heads, d]; inv_freq [rope_dim / 2]. picks [n, topk]: each row's chosen entries
// ascending, -1 after them (fewer than topk closed: all of them). Ties go to the lower entry.
// REQUIRES: spans of the sizes stated.
void index_select(const IndexerSizes& s, std::span<const float> x, std::span<const float> q_residual, int64_t n,
                  int64_t pos0, std::span<const float> keys, int64_t n_keys, std::span<const float> wq_b,
                  std::span<const float> weights_proj, std::span<const float> inv_freq, std::span<int32_t> picks);

}  // namespace dayzero::model::blocks
