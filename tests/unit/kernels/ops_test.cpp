// The small ops of ops.h against plain-loop twins, one case each with its tolerance and
// the reason for it beside it: rmsnorm, rope, swiglu, add_inplace, add_bias, embedding
// (including the out-of-range check), argmax (ties, NaN), log_softmax_at; and the
// vectorised exp of kernels/cpu/simd.h against double std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using test::close;
using test::random_vector;

// exp_shift_sum (simd::exp16) on a dense sweep of [-87.3, 88.3] (softmax uses [-87, 0]: x - max)
// against double std::exp. Measured max relative error 8.2e-8 (1.4 half-ulps); tolerance
// 1e-7. Negative control: exp(x) with x rounded to 2^-15 (an input error of at most
// 1.5e-5, what a cruder range reduction would give) must exceed it. Edges: below FLT_MIN's
// log the result is 0, -inf gives 0, +large gives +inf, NaN stays NaN; the sum is the f32 sum.
TEST(Ops, ExpMatchesStdExp) {
  constexpr double kTol = 1e-7;
  const int64_t n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -87.3f + 175.6f * static_cast<float>(i) / static_cast<float>(n);
  cpu::exp_shift_sum(n, x.data(), 0.0f, y.data());
  double worst = 0, worst_coarse = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = std::exp(double(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / want);
    const float coarse = std::exp(std::round(x[i] * 32768.0f) / 32768.0f);
    worst_coarse = std::max(worst_coarse, std::fabs(coarse - want) / want);
  }
  std::printf("[ measured ] exp max relative error %.3g (tolerance %.3g; control %.3g)\n", worst, kTol, worst_coarse);
  EXPECT_LE(worst, kTol);
  EXPECT_GT(worst_coarse, kTol);

  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edge{-90.0f, -inf, 100.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1.0f, -1.0f};
  std::vector<float> out(edge.size());
  const float sum = cpu::exp_shift_sum(3, edge.data() + 4, 0.0f, out.data() + 4);  // tail only
  EXPECT_NEAR(sum, 1.0f + std::exp(1.0f) + std::exp(-1.0f), 1e-6);
  cpu::exp_shift_sum(static_cast<int64_t>(edge.size()), edge.data(), 0.0f, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], inf);
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_EQ(out[4], 1.0f);
}

TEST(Ops, RmsNorm) {
  const int64_t rows = 3, width = 37;  // odd width: SIMD body and scalar tail
  const float eps = 1e-6f;
  const uint32_t seed = 1;
  const auto x = random_vector(rows * width, seed, -3, 3), w = random_vector(width, seed + 1, 0.5f, 1.5f);
  std::vector<float> got(rows * width), want(rows * width);
  cpu::rmsnorm(rows, width, x.data(), w.data(), eps, got.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(x[r * width + i]) * x[r * width + i];
    const double inv = 1.0 / std::sqrt(ss / width + eps);
    for (int64_t i = 0; i < width; ++i) want[r * width + i] = static_cast<float>(w[i] * (x[r * width + i] * inv));
  }
  EXPECT_TRUE(close("rmsnorm", got, want, {rows, width}, 1e-6, seed));  // f32 sum of 37 squares
}

// The fused residual add + norm gives the two ops' bits (rows over several chunks and threads).
TEST(Ops, AddRmsNormEqualsAddThenRmsNorm) {
  const int64_t rows = 300, width = 577;
  const float eps = 1e-5f;
  const auto delta = random_vector(rows * width, 3, -2, 2), w = random_vector(width, 4, 0.5f, 1.5f);
  auto residual = random_vector(rows * width, 5, -3, 3);
  auto residual_fused = residual;
  std::vector<float> want(rows * width), got(rows * width);
  cpu::add_inplace(rows * width, delta.data(), residual.data());
  cpu::rmsnorm(rows, width, residual.data(), w.data(), eps, want.data());
  cpu::add_rmsnorm(rows, width, delta.data(), residual_fused.data(), w.data(), eps, got.data());
  EXPECT_EQ(std::memcmp(residual.data(), residual_fused.data(), residual.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

TEST(Ops, RopeRotateHalf) {
  const int64_t n_tokens = 3, n_head = 2, head_dim = 10;
  const int32_t positions[] = {0, 7, 4097};  // 4097: the f32 angle product must match HF's
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / head_dim));
  const uint32_t seed = 2;
  auto got = random_vector(n_tokens * n_head * head_dim, seed);
  auto want = got;
  cpu::rope_rotate_half(n_tokens, n_head, head_dim, positions, inv_freq.data(), got.data());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = want.data() + (t * n_head + h) * head_dim;
      for (int64_t i = 0; i < head_dim / 2; ++i) {
        const double angle = static_cast<float>(positions[t]) * inv_freq[i];  // f32 product, as HF
        const double a = v[i], b = v[i + head_dim / 2];
        v[i] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
        v[i + head_dim / 2] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
      }
    }
  EXPECT_TRUE(close("rope", got, want, {n_tokens, n_head, head_dim}, 1e-6, seed));  // cos/sin rounded to f32
  // Position 0 is the identity.
  auto zero = random_vector(head_dim, 9);
  const auto before = zero;
  const int32_t p0 = 0;
  cpu::rope_rotate_half(1, 1, head_dim, &p0, inv_freq.data(), zero.data());
  EXPECT_EQ(zero, before);
}

// swiglu runs on simd::exp16 (16 lanes, the tail through a padded block). n = 1001: 62 full
// blocks and a tail of 9. Measured relative L2 against the double twin 4.2e-8 (one exp16 and
// two roundings); tolerance 1e-7. Negative control: the twin with exp(-g) taken at g (1 + 1e-5),
// an input error of the size the exp test's coarse control makes, must exceed it.
TEST(Ops, SwiGlu) {
  constexpr double kTol = 1e-7;
  const int64_t n = 1001;
  const uint32_t seed = 3;
  auto gate = random_vector(n, seed, -12, 12);
  gate[0] = -200.0f;  // exp(200) overflows to inf in f32: silu must still give -0, not NaN
  gate[1] = 200.0f;
  gate[n - 1] = -200.0f;  // the same in the tail block
  const auto up = random_vector(n, seed + 1);
  std::vector<float> got(n), want(n), control(n);
  cpu::swiglu(n, gate.data(), up.data(), got.data());
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    want[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    control[i] = static_cast<float>(g / (1.0 + std::exp(-g * (1 + 1e-5))) * up[i]);
  }
  std::printf("[ measured ] swiglu relative L2 %.3g (tolerance %.3g; control %.3g)\n", test::rel_l2(got, want), kTol,
              test::rel_l2(control, want));
  EXPECT_TRUE(close("swiglu", got, want, {n}, kTol, seed));
  EXPECT_GT(test::rel_l2(control, want), kTol);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_TRUE(std::signbit(got[0]) == std::signbit(-200.0f * up[0]));
  EXPECT_EQ(got[1], static_cast<float>(200.0 * up[1]));
  EXPECT_EQ(got[n - 1], 0.0f);
  // In place (out = gate), as the MLP block calls it.
  std::vector<float> in_place = gate;
  cpu::swiglu(n, in_place.data(), up.data(), in_place.data());
  EXPECT_EQ(in_place, got);
}

// The threaded element-wise ops give the same bits on 1 and 3 threads, on sizes that split into
// several chunks with a ragged last one (swiglu in 2^16-element chunks, rope by tokens).
TEST(Ops, ThreadCountDoesNotChangeElementwise) {
  const int64_t n = (int64_t{1} << 17) + 37;
  const auto gate = random_vector(n, 11, -12, 12), up = random_vector(n, 12);
  const int64_t n_tokens = 301, n_head = 3, head_dim = 64;
  std::vector<int32_t> positions(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) positions[t] = static_cast<int32_t>(7 * t);
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim));
  const auto q = random_vector(n_tokens * n_head * head_dim, 14);
  auto run = [&](int threads) {
    cpu::set_kernel_threads(threads);
    std::vector<float> s(n), r = q;
    cpu::swiglu(n, gate.data(), up.data(), s.data());
    cpu::rope_rotate_half(n_tokens, n_head, head_dim, positions.data(), inv_freq.data(), r.data());
    cpu::set_kernel_threads(1);
    return std::vector<std::vector<float>>{s, r};
  };
  const auto one = run(1), three = run(3);
  EXPECT_EQ(one[0], three[0]) << "swiglu";
  EXPECT_EQ(one[1], three[1]) << "rope";
}

TEST(Ops, AddInplaceAndBias) {
  const int64_t rows = 3, width = 19;
  const auto x = random_vector(rows * width, 4), b = random_vector(width, 5);
  auto y = random_vector(rows * width, 6);
  auto want = y;
  cpu::add_inplace(rows * width, x.data(), y.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
  EXPECT_TRUE(close("add_inplace", y, want, {rows, width}, 0.0, 4));  // one f32 add: exact
  cpu::add_bias(rows, width, b.data(), y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) want[r * width + i] += b[i];
  EXPECT_TRUE(close("add_bias", y, want, {rows, width}, 0.0, 5));
}

TEST(Ops, Embedding) {
  const int64_t n_rows = 11, width = 6;
  const auto table = random_vector(n_rows * width, 7);
  const int32_t ids[] = {3, 0, 10, 3};
  std::vector<float> got(4 * width), want;
  cpu::embedding(4, ids, n_rows, width, table.data(), got.data());
  for (int32_t id : ids) want.insert(want.end(), table.begin() + id * width, table.begin() + (id + 1) * width);
  EXPECT_TRUE(close("embedding", got, want, {4, width}, 0.0, 7));  // a copy: exact
}

TEST(OpsDeathTest, EmbeddingIdOutOfRangeStopsTheJob) {
  const std::vector<float> table(4 * 2);
  std::vector<float> out(2);
  const int32_t bad[] = {4};
  EXPECT_EXIT(cpu::embedding(1, bad, 4, 2, table.data(), out.data()), ::testing::ExitedWithCode(3),
              "embedding: token 0 has id 4");
  const int32_t negative[] = {-1};
  EXPECT_EXIT(cpu::embedding(1, negative, 4, 2, table.data(), out.data()), ::testing::ExitedWithCode(3),
              "CHECK failed");
}

TEST(Ops, ArgmaxTiesAndNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float ties[] = {1, 5, 2, 5, 5};
  EXPECT_EQ(cpu::argmax(5, ties), 1);  // lowest index among equal maxima
  const float first[] = {9, 9};
  EXPECT_EQ(cpu::argmax(2, first), 0);
  const float nan_first[] = {nan, 1, 3, 3};
  EXPECT_EQ(cpu::argmax(4, nan_first), 2);
  const float all_nan[] = {nan, nan};
  EXPECT_EQ(cpu::argmax(2, all_nan), 0);
  const float neg_inf[] = {-std::numeric_limits<float>::infinity(), -1e30f};
  EXPECT_EQ(cpu::argmax(2, neg_inf), 1);
  const auto big = random_vector(50000, 8);
  int64_t want = 0;
  for (int64_t i = 1; i < 50000; ++i)
    if (big[i] > big[want]) want = i;
  EXPECT_EQ(cpu::argmax(50000, big.data()), want);
}

TEST(Ops, LogSoftmaxAt) {
  const int64_t n = 32000;
  const uint32_t seed = 9;
  auto x = random_vector(n, seed, -20, 20);
  x[5] = 80.0f;  // exp(80 + ...) overflows f32: the max must be subtracted first
  long double mx = x[0], sum = 0;
  for (float v : x) mx = std::max<long double>(mx, v);
  for (float v : x) sum += std::exp(static_cast<long double>(v) - mx);
  for (int64_t i : {int64_t{0}, int64_t{5}, n - 1}) {
    const long double want = x[i] - mx - std::log(sum);
    // f64 accumulation of 32000 terms vs long double: ~1e-12 relative.
    EXPECT_NEAR(cpu::log_softmax_at(n, x.data(), i), static_cast<double>(want), 1e-10 * std::fabs(double(want)) + 1e-12)
        << "index " << i;
  }
}

}  // namespace
}  // namespace dayzero::kernels
