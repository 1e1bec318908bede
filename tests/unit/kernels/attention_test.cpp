// attention_causal against a plain-loop twin (double precision throughout): grouped-query
// heads, decode over an existing cache (pos0 > 0), odd head sizes, cache rows past the
// valid ones poisoned with NaN (they must not be read), prefill-vs-decode agreement and
// thread-count independence; both paths (rows, GEMM) against the twin, with negative
// controls (a wrong scale, a mask one position off) that the tolerance must catch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::identical;
using test::random_vector;

struct Shape {
  int64_t n_tokens, n_head, n_head_kv, head_dim, pos0, n_ctx_max;
};

// out[t, h, :] = softmax_j(scale * q[t, h] · k[j, h / group]) v[j, h / group], j <= pos0 + t.
std::vector<float> twin(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, float scale) {
  std::vector<float> out(s.n_tokens * s.n_head * s.head_dim);
  const int64_t group = s.n_head / s.n_head_kv;
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / group, n_kv = s.pos0 + t + 1;
      std::vector<double> score(n_kv);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n_kv; ++j) {
        double d = 0;
        for (int64_t e = 0; e < s.head_dim; ++e)
          d += double(q[(t * s.n_head + h) * s.head_dim + e]) * k[(j * s.n_head_kv + g) * s.head_dim + e];
        score[j] = scale * d;
        mx = std::max(mx, score[j]);
      }
      for (double& x : score) sum += (x = std::exp(x - mx));
      for (int64_t e = 0; e < s.head_dim; ++e) {
        double o = 0;
        for (int64_t j = 0; j < n_kv; ++j) o += score[j] / sum * v[(j * s.n_head_kv + g) * s.head_dim + e];
        out[(t * s.n_head + h) * s.head_dim + e] = static_cast<float>(o);
      }
    }
  return out;
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const Shape& s, uint32_t seed) {
  Inputs in{random_vector(s.n_tokens * s.n_head * s.head_dim, seed, -2, 2),
            random_vector(s.n_ctx_max * s.n_head_kv * s.head_dim, seed + 1, -2, 2),
            random_vector(s.n_ctx_max * s.n_head_kv * s.head_dim, seed + 2)};
  // Rows past pos0 + n_tokens are not valid cache: NaN there shows any read of them.
  const int64_t valid = (s.pos0 + s.n_tokens) * s.n_head_kv * s.head_dim;
  for (int64_t i = valid; i < static_cast<int64_t>(in.k.size()); ++i)
    in.k[i] = in.v[i] = std::numeric_limits<float>::quiet_NaN();
  return in;
}

enum class Path { kDispatch, kRows, kGemm };

std::vector<float> run(const Shape& s, const Inputs& in, float scale, Path path = Path::kDispatch) {
  std::vector<float> out(s.n_tokens * s.n_head * s.head_dim);
  auto* fn = path == Path::kRows   ? &cpu::attention_causal_rows
             : path == Path::kGemm ? &cpu::attention_causal_gemm
                                   : &cpu::attention_causal;
  fn(s.n_tokens, s.n_head, s.n_head_kv, s.head_dim, s.pos0, in.q.data(), in.k.data(), in.v.data(), scale,
     out.data());
  return out;
}

// Tolerance 1e-5 relative L2 for every case: f32 dot products of <= 128 terms and an f32
// weighted sum of <= 70 rows against a double twin.
TEST(Attention, MatchesTwin) {
  ASSERT_LE(5, cpu::kAttentionGemmMinTokens) << "these cases are meant for the row path";
  struct Case {
    const char* label;
    Shape s;
  };
  const Case cases[] = {
      {"prefill gqa 4", {5, 8, 2, 16, 0, 8}},
      {"decode gqa 4 over cache", {1, 8, 2, 20, 37, 50}},
      {"chunk after cache, odd head_dim", {4, 3, 3, 7, 5, 12}},
      {"gqa 4, head_dim 128", {3, 4, 1, 128, 64, 70}},
      {"multi-query", {6, 6, 1, 9, 2, 8}},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    seed += 3;
    const Inputs in = make_inputs(c.s, seed);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.s.head_dim));
    EXPECT_TRUE(close(c.label, run(c.s, in, scale), twin(c.s, in.q, in.k, in.v, scale),
                      {c.s.n_tokens, c.s.n_head, c.s.head_dim}, 1e-5, seed));
  }
}

// Each (token, head) row is computed on its own, so the last token of a prefill and the
// same token decoded over the cache are the same bits, as are 1 and 2 threads.
TEST(Attention, PrefillEqualsDecodeAndThreadsDoNotMatter) {
  const Shape prefill{9, 8, 2, 32, 0, 9};
  const Inputs in = make_inputs(prefill, 77);
  const float scale = 0.125f;
  cpu::set_kernel_threads(1);
  const auto full = run(prefill, in, scale);
  cpu::set_kernel_threads(2);
  EXPECT_TRUE(identical("1 vs 2 threads", full, run(prefill, in, scale), {9, 8, 32}));
  cpu::set_kernel_threads(1);

  const Shape decode{1, 8, 2, 32, 8, 9};
  Inputs last = in;
  last.q.assign(in.q.end() - 8 * 32, in.q.end());
  const auto one = run(decode, last, scale);
  const std::vector<float> tail(full.end() - 8 * 32, full.end());
  EXPECT_TRUE(identical("decode vs prefill last token", one, tail, {8, 32}));
}

// Both paths on shapes either could take: prefill from 0 (several query tiles, the last one
// partial), a chunk after a cache, MHA, MQA, an odd head_dim, head_dim 128. Worst relative L2
// measured against the double twin: rows 1.9e-7, GEMM 1.6e-7 (the built-in kernel; f32 sums
// in either order); tolerance 5e-7. Negative controls: a scale 1.001 times
// too large (the softmax sharpens) and a mask one key short must each
// exceed it, so the tolerance can fail.
TEST(Attention, GemmAndRowPathsMatchTwin) {
  struct Case {
    const char* label;
    Shape s;
  };
  const Case cases[] = {
      {"prefill gqa 2, 3 tiles", {150, 4, 2, 32, 0, 150}},
      {"chunk after cache, gqa 4", {40, 8, 2, 16, 33, 80}},
      {"mha, odd head_dim", {20, 3, 3, 7, 0, 20}},
      {"multi-query", {70, 6, 1, 9, 5, 80}},
      {"head_dim 128", {17, 2, 1, 128, 3, 24}},
  };
  constexpr double kTol = 5e-7;
  uint32_t seed = 200;
  double worst[2] = {0, 0};
  for (const Case& c : cases) {
    seed += 3;
    const Inputs in = make_inputs(c.s, seed);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.s.head_dim));
    const auto want = twin(c.s, in.q, in.k, in.v, scale);
    const std::vector<int64_t> shape{c.s.n_tokens, c.s.n_head, c.s.head_dim};
    int i = 0;
    for (Path p : {Path::kRows, Path::kGemm}) {
      const auto got = run(c.s, in, scale, p);
      EXPECT_TRUE(close(std::string(c.label) + (p == Path::kRows ? " rows" : " gemm"), got, want, shape, kTol, seed));
      worst[i] = std::max(worst[i], test::rel_l2(got, want));
      ++i;
    }
    // Negative controls on the GEMM path.
    EXPECT_GT(test::rel_l2(run(c.s, in, scale * 1.001f, Path::kGemm), want), kTol) << c.label << ": scale x1.001";
    Shape short_mask = c.s;  // every token sees one key too few (its own position is masked)
    short_mask.pos0 -= 1;
    if (short_mask.pos0 >= 0) {
      EXPECT_GT(test::rel_l2(run(short_mask, in, scale, Path::kGemm), want), kTol) << c.label << ": mask off by one";
    }
  }
  std::printf("[ measured ] worst relative L2: rows %.3g, gemm %.3g (tolerance %.3g)\n", worst[0], worst[1], kTol);
}

// The GEMM path gives the same bits run twice and on 1 or 2 threads (tiles are independent
// work items), and the dispatch takes it at 64 tokens.
TEST(Attention, GemmPathRepeatable) {
  const Shape s{64, 4, 2, 32, 0, 64};
  const Inputs in = make_inputs(s, 99);
  cpu::set_kernel_threads(2);
  const auto a = run(s, in, 0.2f, Path::kGemm), b = run(s, in, 0.2f, Path::kGemm);
  cpu::set_kernel_threads(1);
  EXPECT_TRUE(identical("gemm path twice", a, b, {64, 4, 32}));
  EXPECT_TRUE(identical("gemm path 2 vs 1 threads", a, run(s, in, 0.2f, Path::kGemm), {64, 4, 32}));
  EXPECT_TRUE(identical("dispatch takes gemm at 64 tokens", a, run(s, in, 0.2f), {64, 4, 32}));
}

}  // namespace
}  // namespace dayzero::kernels
