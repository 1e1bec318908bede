// DeepSeek-V4's attention blocks against transformers: blocks/v4_compressor (the KV compressor and
// its cache state), blocks/v4_indexer and blocks/v4_attention. The compressor against transformers
// 5.25 on the tiny deepseek_v4 model (tests/data/golden/deepseek_v4.safetensors, cmp.*): layer 1
// (CSA, 1 entry per 4 tokens, overlapping windows) and layer 2 (HCA, 1 per 8) over the 40-token
// prompt in one call, then the 8 greedy tokens one call each, which closes CSA entries at 44 and
// 48 and an HCA entry at 48 from the tail carried across calls. Any split of the same rows gives
// the same entries bit for bit. Negative controls: the main rotary's theta instead of the
// compressed one, CSA without its overlap, the tail dropped between calls. And layer 1's
// lightning indexer (blocks/v4_indexer) on the same calls: the entries each row picks. And
// layers 0-2's attention output (blocks/v4_attention) for every row, measured within relative
// L2 4.27e-7 (tolerance 5e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/blocks/v4_compressor.h"
#include "model/blocks/v4_attention.h"
#include "model/blocks/v4_indexer.h"
#include "tests/unit/model/v4_golden.h"

namespace dayzero::model::blocks {
namespace {

using v4_test::rel_l2;
const std::vector<float>& g(const std::string& name) { return v4_test::golden(name); }

constexpr int64_t kD = 64, kPrompt = 40, kDecode = 8;

CompressorSizes sizes(int layer) {
  const bool csa = layer == 1;
  return {kD, 64, csa ? 4 : 8, csa ? 2 : 1, 16, 1e-6f};
}

// Runs layer's compressor over rows [0, 48) in calls of the given sizes; entries after the call
// that ends at `stop_after` rows are copied to *at_stop.
struct Variant {
  bool reset_tail = false;                 // drop the window not yet closed between calls (wrong)
  bool no_overlap = false;                 // CSA without the previous window's Ca (wrong)
  const std::vector<float>* freq = nullptr;  // another rotary (wrong)
};
std::vector<float> run(int layer, const std::vector<int64_t>& calls, int64_t stop_after, std::vector<float>* at_stop,
                       const Variant& v = {}) {
  const CompressorSizes s = sizes(layer);
  const std::string p = "cmp.layers." + std::to_string(layer) + ".";
  const std::vector<float>& x = g(p + "x");
  CompressorState st;
  int64_t row = 0;
  for (const int64_t n : calls) {
    if (v.reset_tail) st.pending_kv.clear(), st.pending_gate.clear();
    if (v.no_overlap) st.overlap_kv.clear(), st.overlap_gate.clear();
    compress_kv(s, st, std::span<const float>(x).subspan(row * kD, n * kD), n, g(p + "wkv"), g(p + "wgate"),
                g(p + "ape"), g(p + "norm"), v.freq ? *v.freq : g("cmp.compress_inv_freq"));
    row += n;
    if (row == stop_after && at_stop) *at_stop = st.entries;
  }
  return st.entries;
}

std::vector<int64_t> prompt_then_decode() {
  std::vector<int64_t> calls = {kPrompt};
  calls.insert(calls.end(), kDecode, 1);
  return calls;
}

// Measured: relative L2 to transformers 1.85e-7 / 1.96e-7 (CSA prefill / after decode), 1.61e-7 /
// 1.75e-7 (HCA); tolerance 3e-7. Every entry is closed from the same rows in the same order whatever the split, so splits
// agree exactly.
TEST(V4Compressor, PrefillAndDecodeMatchTransformers) {
  for (int layer : {1, 2}) {
    SCOPED_TRACE(layer);
    const std::string p = "cmp.layers." + std::to_string(layer) + ".";
    std::vector<float> prefill;
    const std::vector<float> final_entries = run(layer, prompt_then_decode(), kPrompt, &prefill);
    const double e_prefill = rel_l2(prefill, g(p + "entries_prefill"));
    const double e_final = rel_l2(final_entries, g(p + "entries_final"));
    EXPECT_LT(e_prefill, 3e-7);
    EXPECT_LT(e_final, 3e-7);
    std::printf("layer %d: %zu entries after prefill (rel L2 %.2e), %zu after decode (rel L2 %.2e)\n", layer,
                prefill.size() / 64, e_prefill, final_entries.size() / 64, e_final);
    EXPECT_EQ(run(layer, {48}, 0, nullptr), final_entries);
    EXPECT_EQ(run(layer, {5, 7, 3, 13, 1, 2, 17}, 0, nullptr), final_entries);
  }
}

TEST(V4Compressor, NegativeControlsFail) {
  // The main rotary (theta 10000, no YaRN) of the tiny model's 16 rotated channels.
  std::vector<float> main_freq(8);
  for (int i = 0; i < 8; ++i) main_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / 16));
  for (int layer : {1, 2}) {
    const std::string p = "cmp.layers." + std::to_string(layer) + ".";
    Variant theta;
    theta.freq = &main_freq;
    EXPECT_GT(rel_l2(run(layer, prompt_then_decode(), 0, nullptr, theta), g(p + "entries_final")), 3e-7) << layer;
    Variant tail;
    tail.reset_tail = true;
    EXPECT_GT(rel_l2(run(layer, prompt_then_decode(), 0, nullptr, tail), g(p + "entries_final")), 3e-7) << layer;
  }
  Variant overlap;
  overlap.no_overlap = true;
  EXPECT_GT(rel_l2(run(1, prompt_then_decode(), 0, nullptr, overlap), g("cmp.layers.1.entries_final")), 3e-7);
}

// Layer 1's lightning indexer over the same calls: its own compressor's keys (head_dim 32,
// overlapping windows of 4) and each row's picks (top 4 of the closed entries). Measured: all 48
// rows pick the entries transformers picks. Negative controls: the keys compressed without
// CSA's overlap, the queries rotated with the main rotary.
std::vector<int32_t> indexer_picks(bool overlap, const std::vector<float>& freq) {
  const std::vector<float>& x = g("cmp.layers.1.x");
  const std::vector<float>& qr = g("cmp.indexer.q_residual");
  const CompressorSizes cs{kD, 32, 4, 2, 16, 1e-6f};
  const IndexerSizes is{kD, 32, 8, 32, 16, 4, 4};
  CompressorState st;
  std::vector<int32_t> picks(48 * 4);
  int64_t row = 0;
  for (const int64_t n : prompt_then_decode()) {
    if (!overlap) st.overlap_kv.clear(), st.overlap_gate.clear();
    compress_kv(cs, st, std::span<const float>(x).subspan(row * kD, n * kD), n, g("cmp.indexer.wkv"),
                g("cmp.indexer.wgate"), g("cmp.indexer.ape"), g("cmp.indexer.norm"), g("cmp.compress_inv_freq"));
    index_select(is, std::span<const float>(x).subspan(row * kD, n * kD), std::span<const float>(qr).subspan(row * 32, n * 32),
                 n, row, st.entries, st.n_entries, g("cmp.indexer.wq_b"), g("cmp.indexer.weights_proj"), freq,
                 std::span<int32_t>(picks).subspan(row * 4, n * 4));
    row += n;
  }
  return picks;
}

TEST(V4Indexer, PicksMatchTransformers) {
  const std::vector<float>& want_f = g("cmp.indexer.picks");
  const std::vector<int32_t> want(want_f.begin(), want_f.end());
  const std::vector<int32_t> got = indexer_picks(true, g("cmp.compress_inv_freq"));
  int same = 0;
  for (int r = 0; r < 48; ++r)
    same += std::equal(got.begin() + r * 4, got.begin() + r * 4 + 4, want.begin() + r * 4) ? 1 : 0;
  EXPECT_EQ(same, 48);
  std::printf("indexer: %d of 48 rows pick what transformers picks\n", same);
  EXPECT_NE(indexer_picks(false, g("cmp.compress_inv_freq")), want);
  std::vector<float> main_freq(8);
  for (int i = 0; i < 8; ++i) main_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / 16));
  EXPECT_NE(indexer_picks(true, main_freq), want);
}

// Layers 0 (sliding), 1 (CSA) and 2 (HCA) end to end over the prompt and the 8 decode steps:
// the attention output of every row against transformers' DeepseekV4Attention, the compressor,
// indexer and window caches carried across the calls. Negative controls: no sinks, a window one
// entry short, HCA entries left out.
struct AttnVariant {
  bool no_sinks = false, short_window = false, no_entries = false;
};
std::vector<float> attention_rows(int layer, const AttnVariant& v = {}) {
  const std::string p = "attn.layers." + std::to_string(layer) + ".";
  const std::vector<float>& x = g(p + "x");
  V4AttentionSizes as{kD, 32, 4, 64, 16, v.short_window ? 7 : 8, 2, 32, 1e-6f};
  std::vector<float> sinks = g(p + "sinks");
  if (v.no_sinks) std::fill(sinks.begin(), sinks.end(), -INFINITY);
  const bool compressed = layer != 0, csa = layer == 1;
  const std::string c = "cmp.layers." + std::to_string(layer) + ".";
  const CompressorSizes cs = compressed ? sizes(layer) : CompressorSizes{};
  const CompressorSizes ics{kD, 32, 4, 2, 16, 1e-6f};
  const IndexerSizes is{kD, 32, 8, 32, 16, 4, 4};
  V4WindowCache window;
  CompressorState st, ist;
  std::vector<float> out(48 * kD);
  std::vector<int32_t> picks;
  int64_t row = 0;
  for (const int64_t n : prompt_then_decode()) {
    const auto xs = std::span<const float>(x).subspan(row * kD, n * kD);
    V4Compressed cm;
    if (compressed) {
      compress_kv(cs, st, xs, n, g(c + "wkv"), g(c + "wgate"), g(c + "ape"), g(c + "norm"), g("cmp.compress_inv_freq"));
      cm = {st.entries, v.no_entries ? 0 : st.n_entries, cs.rate, {}, 0};
    }
    if (csa) {
      compress_kv(ics, ist, xs, n, g("cmp.indexer.wkv"), g("cmp.indexer.wgate"), g("cmp.indexer.ape"),
                  g("cmp.indexer.norm"), g("cmp.compress_inv_freq"));
      picks.assign(n * 4, -1);
      index_select(is, xs, std::span<const float>(g("cmp.indexer.q_residual")).subspan(row * 32, n * 32), n, row,
                   ist.entries, ist.n_entries, g("cmp.indexer.wq_b"), g("cmp.indexer.weights_proj"),
                   g("cmp.compress_inv_freq"), picks);
      cm.picks = picks;
      cm.topk = 4;
    }
    v4_attention(as, window, xs, n, g(p + "wq_a"), g(p + "q_norm"), g(p + "wq_b"), g(p + "wkv"), g(p + "kv_norm"),
                 sinks, g(p + "wo_a"), g(p + "wo_b"), compressed ? g("cmp.compress_inv_freq") : g("cmp.main_inv_freq"),
                 cm, std::span<float>(out).subspan(row * kD, n * kD));
    row += n;
  }
  return out;
}

TEST(V4Attention, LayersMatchTransformersThroughDecode) {
  for (int layer : {0, 1, 2}) {
    SCOPED_TRACE(layer);
    const std::string p = "attn.layers." + std::to_string(layer) + ".";
    const std::vector<float> got = attention_rows(layer);
    const std::vector<float>& want = g(p + "out");
    const double e = rel_l2(got, want);
    const double e_decode = rel_l2(std::vector<float>(got.begin() + kPrompt * kD, got.end()),
                                   std::vector<float>(want.begin() + kPrompt * kD, want.end()));
    EXPECT_LT(e, 5e-7);
    EXPECT_LT(e_decode, 5e-7);
    std::printf("attention layer %d: relative L2 %.2e (decode rows %.2e)\n", layer, e, e_decode);
    AttnVariant sinks;
    sinks.no_sinks = true;
    EXPECT_GT(rel_l2(attention_rows(layer, sinks), want), 5e-7);
    AttnVariant window;
    window.short_window = true;
    EXPECT_GT(rel_l2(attention_rows(layer, window), want), 5e-7);
  }
  AttnVariant entries;
  entries.no_entries = true;
  EXPECT_GT(rel_l2(attention_rows(2, entries), g("attn.layers.2.out")), 5e-7);
}

}  // namespace
}  // namespace dayzero::model::blocks
