// The checks the GEMM tests of weights kept as stored (FP8, INT4, FP4) share. A format's test gives its
// layouts, a maker of cases (make(n, k, layout, seed) -> a case with n, weight(), dequantised()
// [n, k] as the dequantising load gives it, label()) and its entry points: dequantise(weight, k,
// j0, rows, out) and matmul(m, n, k, x, weight, y, accumulate).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels::test {

inline std::string gemm_case_label(const std::string& c, int64_t m, bool acc, int threads) {
  return c + " m=" + std::to_string(m) + (acc ? " accumulate" : "") + " threads=" + std::to_string(threads);
}

// Whole weights and rows 30..35 dequantised: the dequantising load's bits.
template <typename Layouts, typename Make, typename Dequantise>
void check_dequantise_rows(const Layouts& layouts, const Make& make, const Dequantise& dequantise) {
  uint32_t seed = 10;
  for (const auto& l : layouts)
    for (int64_t k : {1, 15, 600}) {
      const auto c = make(37, k, l, ++seed);
      const auto want = c.dequantised();
      std::vector<float> got(want.size());
      dequantise(c.weight(), k, 0, c.n, got.data());
      ASSERT_TRUE(identical(c.label(), got, want, {c.n, k}));
      std::vector<float> part(static_cast<size_t>(5 * k));
      dequantise(c.weight(), k, 30, 5, part.data());
      ASSERT_TRUE(identical(c.label() + " rows 30..35", part,
                            std::vector<float>(want.begin() + 30 * k, want.begin() + 35 * k), {5, k}));
    }
}

// Decode shapes (m of the small-M kernel, n and k with edges and scalar tails, one and two
// threads): the bits of matmul_nt on the dequantised weight.
template <typename Layouts, typename Make, typename Matmul>
void check_small_m_bits(const Layouts& layouts, const Make& make, const Matmul& matmul) {
  const int threads0 = cpu::gemm_info().threads;
  uint32_t seed = 500;
  for (int threads : {1, 2}) {
    cpu::gemm_set_threads(threads);
    for (const auto& l : layouts)
      for (int64_t m : {1, 2, 5, 16})
        for (int64_t n : {1, 7, 130})
          for (int64_t k : {1, 15, 600, 1537})
            for (bool acc : {false, true}) {
              ++seed;
              const auto c = make(n, k, l, seed);
              const auto x = random_vector(m * k, seed + 3);
              auto got = random_vector(m * n, seed + 5), want = got;
              matmul(m, n, k, x.data(), c.weight(), got.data(), acc);
              cpu::matmul_nt(m, n, k, x.data(), c.dequantised().data(), want.data(), acc);
              ASSERT_TRUE(identical(gemm_case_label(c.label(), m, acc, threads), got, want, {m, n}));
            }
  }
  cpu::gemm_set_threads(threads0);
}

// Above m = 16: the dequantised panels through the large-M path, against the twin (the
// tolerance of gemm_bf16_test, whose panels are the same code).
template <typename Layouts, typename Make, typename Matmul>
void check_large_m_twin(const Layouts& layouts, const Make& make, const Matmul& matmul) {
  uint32_t seed = 900;
  struct Shape {
    int64_t m, n, k;
  };
  for (const auto [m, n, k] : {Shape{17, 33, 15}, Shape{17, 700, 4100}, Shape{64, 130, 600}})
    for (const auto& l : layouts)
      for (bool acc : {false, true}) {
        ++seed;
        const auto c = make(n, k, l, seed);
        const auto x = random_vector(m * k, seed + 3);
        auto got = random_vector(m * n, seed + 5);
        const auto ref = matmul_nt_twin(m, n, k, x, c.dequantised(), got, acc);
        matmul(m, n, k, x.data(), c.weight(), got.data(), acc);
        ASSERT_TRUE(close(gemm_case_label(c.label(), m, acc, cpu::gemm_info().threads), got, ref, {m, n}, 4e-7, seed));
      }
}

// Two products of the format (make_a(130, k, seed), make_b(64, k, seed)) and one f32 product of
// one x in one matmul_nt_shared_x call, on one and two threads (the products are prepared once on
// the calling thread and read on the pool's): each has the bits of its own call.
template <typename MakeA, typename MakeB, typename Matmul>
void check_shared_x(const MakeA& make_a, const MakeB& make_b, const Matmul& matmul) {
  const int threads0 = cpu::gemm_info().threads;
  uint32_t seed = 1300;
  for (int threads : {1, 2}) {
    cpu::gemm_set_threads(threads);
    for (int64_t m : {1, 3, 16, 17})
      for (int64_t k : {15, 600})
        for (bool acc : {false, true}) {
          const std::vector<int64_t> ns = {130, 7, 64};
          const auto x = random_vector(m * k, ++seed);
          const auto a = make_a(ns[0], k, ++seed);
          const auto b = make_b(ns[2], k, ++seed);
          const auto wa = a.weight(), wb = b.weight();
          const auto wf = random_vector(ns[1] * k, ++seed);
          std::vector<std::vector<float>> got(3), want(3);
          for (size_t i = 0; i < 3; ++i) got[i] = want[i] = random_vector(m * ns[i], ++seed);
          matmul(m, ns[0], k, x.data(), wa, want[0].data(), acc);
          cpu::matmul_nt(m, ns[1], k, x.data(), wf.data(), want[1].data(), acc);
          matmul(m, ns[2], k, x.data(), wb, want[2].data(), acc);
          const cpu::NtProduct products[] = {{ns[0], &wa, cpu::WeightKind::kStored, got[0].data()},
                                             {ns[1], wf.data(), cpu::WeightKind::kF32, got[1].data()},
                                             {ns[2], &wb, cpu::WeightKind::kStored, got[2].data()}};
          cpu::matmul_nt_shared_x(m, k, x.data(), products, 3, acc);
          for (size_t i = 0; i < 3; ++i)
            ASSERT_TRUE(identical("m=" + std::to_string(m) + " k=" + std::to_string(k) + " product " +
                                      std::to_string(i) + " threads=" + std::to_string(threads),
                                  got[i], want[i], {m, ns[i]}));
        }
  }
  cpu::gemm_set_threads(threads0);
}

}  // namespace dayzero::kernels::test
