// DeepSeek-V4's KV compressor (transformers' DeepseekV4HCACompressor / DeepseekV4CSACompressor and
// the cache state they keep): every `rate` tokens of a layer's input become one compressed entry,
// a softmax-gated sum over the window (gates plus a learned per-position bias `ape`), RMSNormed
// and rotated (interleaved pairs on the trailing rope_dim channels) at the window's first
// position. HCA (coff 1): non-overlapping windows of `rate`. CSA (coff 2): each token projects two
// series, Ca (first head_dim) and Cb (second); entry w gates window w-1's Ca with window w's Cb
// over 2 x rate slots. The state carries the tokens of a window not yet closed and the last
// window's Ca across calls, so compressing a sequence in any split equals compressing it whole.
// Host arrays in f32. Not the indexer's scoring nor the attention over the entries.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dayzero::model::blocks {

struct CompressorSizes {
  int64_t d = 0;         // input width (hidden_size)
  int64_t head_dim = 0;  // width of one entry
  int64_t rate = 0;      // tokens per entry
  int64_t coff = 1;      // 1: HCA, 2: CSA (overlapping Ca / Cb series)
  int64_t rope_dim = 0;  // rotated trailing channels of an entry
  float rms_eps = 1e-6f;
};

// One layer's compressor state of one sequence.
struct CompressorState {
  std::vector<float> pending_kv, pending_gate;  // [pending, coff * head_dim]: a window not yet closed
  std::vector<float> overlap_kv, overlap_gate;  // [rate, head_dim]: the last window's Ca (CSA; gate with ape)
  std::vector<float> entries;                   // [n_entries, head_dim]: every entry so far
  int64_t n_entries = 0;
};

// Appends the entries that the rows x [n, d] (the next n positions of the sequence) close to
// state.entries. wkv, wgate [coff * head_dim, d]; ape [rate, coff * head_dim]; norm [head_dim];
// inv_freq [rope_dim / 2] (the compressed branches' rotary). Returns the number of new entries.
// REQUIRES: spans of the sizes stated.
int64_t compress_kv(const CompressorSizes& s, CompressorState& state, std::span<const float> x, int64_t n,
                    std::span<const float> wkv, std::span<const float> wgate, std::span<const float> ape,
                    std::span<const float> norm, std::span<const float> inv_freq);

}  // namespace dayzero::model::blocks
