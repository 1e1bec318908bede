// blocks/mhc (DeepSeek-V4's hyper-connections) against transformers 5.25 on the tiny deepseek_v4
// model (tests/data/golden/deepseek_v4.safetensors, mhc.*: tools/make_hf_goldens.py): layer 1's
// attn_hc and ffn_hc weights (pre-collapse, post, Sinkhorn-projected comb), the stream update
// between them, and the hc_head collapse, each within a relative L2 just above what was
// measured, with Sinkhorn at one iteration and an identity comb as negative controls.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/blocks/mhc.h"
#include "tests/unit/model/v4_golden.h"

namespace dayzero::model::blocks {
namespace {

using v4_test::rel_l2;
const std::vector<float>& g(const std::string& name) { return v4_test::golden(name); }

// The tiny model: 40 prompt tokens, 2 streams of 64, 20 Sinkhorn iterations, eps 1e-6.
HyperConnectionSizes sizes(int64_t iters = 20) { return {40, 2, 64, iters, 1e-6f, 1e-6f}; }

struct Pre {
  std::vector<float> collapsed, post, comb;
};
Pre run_pre(const std::string& site, int64_t iters) {
  const HyperConnectionSizes s = sizes(iters);
  Pre p{std::vector<float>(s.n_tokens * s.d), std::vector<float>(s.n_tokens * s.hc),
        std::vector<float>(s.n_tokens * s.hc * s.hc)};
  const std::string k = "mhc.layers.1." + site + ".";
  hyper_connection_pre(s, g(k + "streams"), g(k + "fn"), g(k + "base"), g(k + "scale"), p.collapsed, p.post, p.comb);
  return p;
}

// Measured against transformers (f32 both sides): collapsed <= 7.9e-8, post <= 7.6e-8, comb <=
// 9.7e-8, the stream update 4.8e-8, hc_head 1.03e-7; tolerance 2e-7 (kTol). The controls: Sinkhorn
// at 1 iteration moves comb by 5.5e-2 and 7.3e-2, an identity comb the streams by 1.3e-1.
constexpr double kTol = 2e-7;
TEST(HyperConnection, WeightsMatchTransformers) {
  for (const char* site : {"attn_hc", "ffn_hc"}) {
    SCOPED_TRACE(site);
    const std::string k = std::string("mhc.layers.1.") + site + ".";
    const Pre p = run_pre(site, 20);
    const double e_collapsed = rel_l2(p.collapsed, g(k + "collapsed")), e_post = rel_l2(p.post, g(k + "post")),
                 e_comb = rel_l2(p.comb, g(k + "comb"));
    EXPECT_LT(e_collapsed, kTol);
    EXPECT_LT(e_post, kTol);
    EXPECT_LT(e_comb, kTol);
    std::printf("%s: relative L2 collapsed %.2e post %.2e comb %.2e\n", site, e_collapsed, e_post, e_comb);
    // Negative control: Sinkhorn-Knopp cut to its first column normalisation.
    const Pre wrong = run_pre(site, 1);
    const double e_wrong = rel_l2(wrong.comb, g(k + "comb"));
    EXPECT_GT(e_wrong, kTol);
    std::printf("%s: comb with 1 Sinkhorn iteration: relative L2 %.2e\n", site, e_wrong);
  }
}

// attn_hc's streams updated with the attention output are ffn_hc's input streams.
TEST(HyperConnection, StreamUpdateMatchesTransformers) {
  const HyperConnectionSizes s = sizes();
  const Pre p = run_pre("attn_hc", 20);
  std::vector<float> streams = g("mhc.layers.1.attn_hc.streams");
  hyper_connection_post(s, streams, g("mhc.layers.1.attn_out"), p.post, p.comb);
  const double e = rel_l2(streams, g("mhc.layers.1.ffn_hc.streams"));
  EXPECT_LT(e, kTol);
  std::printf("stream update: relative L2 %.2e\n", e);
  // Negative control: a plain residual in place of comb (each stream kept as it was). (Comb
  // untransposed is no control at 2 streams: a doubly-stochastic 2 x 2 matrix is symmetric.)
  std::vector<float> comb_t(p.comb.size(), 0.0f);
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t j = 0; j < s.hc; ++j) comb_t[(t * s.hc + j) * s.hc + j] = 1.0f;
  std::vector<float> wrong = g("mhc.layers.1.attn_hc.streams");
  hyper_connection_post(s, wrong, g("mhc.layers.1.attn_out"), p.post, comb_t);
  const double e_wrong = rel_l2(wrong, g("mhc.layers.1.ffn_hc.streams"));
  EXPECT_GT(e_wrong, kTol);
  std::printf("stream update with an identity comb: relative L2 %.2e\n", e_wrong);
}

TEST(HyperConnection, HeadMatchesTransformers) {
  const HyperConnectionSizes s = sizes();
  std::vector<float> out(s.n_tokens * s.d);
  hyper_head(s, g("mhc.hc_head.streams"), g("mhc.hc_head.fn"), g("mhc.hc_head.base"), g("mhc.hc_head.scale"), out);
  const double e = rel_l2(out, g("mhc.hc_head.out"));
  EXPECT_LT(e, kTol);
  std::printf("hc_head: relative L2 %.2e\n", e);
}

}  // namespace
}  // namespace dayzero::model::blocks
