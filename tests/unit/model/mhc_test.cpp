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

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "model/blocks/mhc.h"

namespace dayzero::model::blocks {
namespace {

using Tensors = std::map<std::string, std::vector<float>>;

const Tensors& golden() {
  static const Tensors t = [] {
    Tensors out;
    auto f = checkpoint::SafetensorsFile::open(std::string(DAYZERO_SOURCE_DIR) +
                                               "/tests/data/golden/deepseek_v4.safetensors");
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (!f.ok()) return out;
    checkpoint::ByteReader reader;
    for (const auto& info : f->tensors()) {
      if (info.name.rfind("mhc.", 0) != 0) continue;
      std::vector<uint8_t> bytes(info.nbytes);
      EXPECT_TRUE(reader.read(info.file, info.offset, info.nbytes, bytes.data()).ok());
      std::vector<float> v(static_cast<size_t>(shape_numel(info.shape)));
      convert_to_f32(info.dtype, bytes.data(), v.data(), v.size());
      out[info.name] = std::move(v);
    }
    return out;
  }();
  return t;
}

const std::vector<float>& g(const std::string& name) {
  const auto it = golden().find(name);
  EXPECT_NE(it, golden().end()) << name;
  static const std::vector<float> kEmpty;
  return it == golden().end() ? kEmpty : it->second;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

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
