// GEMM tests: the OpenBLAS core rule as a pure function (the AVX-512 "Prescott" fallback is
// not reproducible on every CPU), each available path against the double-precision twin on
// odd shapes, matmul_nt's edge cases and accumulate, thread control, and determinism.
// Not a benchmark: bench/gemm_bench.cpp measures speed.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace dayzero::kernels {
namespace {

using cpu::gemm::CpuIsa;
using cpu::gemm::decide_openblas_core;
using cpu::gemm::IsaClass;
using test::close;
using test::identical;
using test::random_vector;

using test::matmul_nt_twin;

TEST(GemmCoreRule, TableOfCases) {
  const CpuIsa avx512_intel{IsaClass::kAvx512, false}, avx2_amd{IsaClass::kAvx2, true},
      avx2_intel{IsaClass::kAvx2, false};
  struct Case {
    const char* label;
    CpuIsa isa;
    const char* detected;
    const char* user;
    bool force;
    const char* core;
  };
  const Case cases[] = {
      // The motivating case: an AVX-512 Xeon OpenBLAS 0.3.21 does not know -> Prescott.
      {"avx512 xeon misdetected", avx512_intel, "Prescott", nullptr, true, "SkylakeX"},
      {"avx512 detected as haswell", avx512_intel, "Haswell", nullptr, true, "SkylakeX"},
      {"avx512 right", avx512_intel, "SkylakeX", nullptr, false, ""},
      {"cooperlake is avx512", avx512_intel, "Cooperlake", nullptr, false, ""},
      {"zen right", avx2_amd, "Zen", nullptr, false, ""},
      {"zen misdetected", avx2_amd, "Prescott", nullptr, true, "Zen"},
      {"intel avx2 as sandybridge", avx2_intel, "Sandybridge", nullptr, true, "Haswell"},
      {"library wider than the os allows", avx2_intel, "SkylakeX", nullptr, true, "Haswell"},
      {"case-insensitive", avx2_intel, "HASWELL", nullptr, false, ""},
      {"user choice honoured", avx512_intel, "Prescott", "Prescott", false, ""},
      {"empty user value ignored", avx512_intel, "Prescott", "", true, "SkylakeX"},
      {"unknown core left alone", avx512_intel, "FutureLake", nullptr, false, ""},
  };
  for (const Case& c : cases) {
    const auto d = decide_openblas_core(c.isa, c.detected, c.user);
    EXPECT_EQ(d.force, c.force) << c.label << ": " << d.reason;
    EXPECT_EQ(d.core, c.core) << c.label << ": " << d.reason;
    EXPECT_FALSE(d.reason.empty()) << c.label;
  }
  EXPECT_NE(decide_openblas_core(avx512_intel, "Prescott", "Prescott").reason.find("honoured"), std::string::npos);
}

TEST(GemmSelection, ChosenPathIsNamed) {
  const cpu::GemmInfo& info = cpu::gemm_info();
  std::printf("gemm path: %s; threads %d; cpu %s\n", info.path.c_str(), info.threads,
              cpu::gemm::detect_isa().describe().c_str());
  EXPECT_FALSE(info.path.empty());
  EXPECT_GE(info.threads, 1);
  EXPECT_NE(info.path.find(cpu::gemm::selected_path().name()), std::string::npos) << info.path;
}

// Element-wise check of y against the double-precision twin with the classic bound for a sum
// of k products (plus the accumulated y) in any order, products rounded or fused:
// |err| <= (k + 2) * 2^-24 * (sum |x_p w_p| + |y0|). Returns the worst err / bound and fills
// *first with the first element over the bound.
double worst_ratio(int64_t m, int64_t n, int64_t k, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& y0, bool acc, const std::vector<float>& got, std::string* first) {
  const auto want = matmul_nt_twin(m, n, k, x, w, y0, acc);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double mag = acc ? std::fabs(double(y0[i * n + j])) : 0.0;
      for (int64_t p = 0; p < k; ++p) mag += std::fabs(double(x[i * k + p]) * w[j * k + p]);
      const double bound = (k + 2) * 0x1p-24 * mag + 1e-30;
      const double err = std::fabs(double(got[i * n + j]) - want[i * n + j]);
      const double r = err / bound;
      if (r > 1 && first->empty())
        *first = "y[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(got[i * n + j]) +
                 ", twin " + std::to_string(want[i * n + j]) + ", bound " + std::to_string(bound);
      worst = std::max(worst, r);
    }
  return worst;
}

// The path matmul_nt() dispatches to, on shapes the selection's own verify_path() did not run
// (odd m/n/k, k past 1024, accumulate, m = 1 decode products), against the plain triple loop.
// Two negative controls per shape show the bound is tight enough to see real bugs: the last
// product of every dot dropped (an off-by-one in k), and accumulate ignored.
TEST(GemmSelection, SelectedPathMatchesTripleLoopOnUnverifiedShapes) {
  struct Case {
    int64_t m, n, k;
    bool acc;
  };
  const Case cases[] = {{1, 257, 511, false}, {1, 1001, 129, true}, {3, 13, 1023, true}, {31, 129, 65, false},
                        {2, 9, 1025, false},  {129, 9, 33, true},   {7, 513, 257, true}, {5, 7, 1, true}};
  for (const Case& c : cases)
    for (const auto& v : cpu::gemm::verify_shapes())
      ASSERT_FALSE(v.m == c.m && v.n == c.n && v.k == c.k) << "selection already verified " << c.m << "x" << c.n << "x" << c.k;
  uint32_t seed = 500;
  for (const Case& c : cases) {
    ++seed;
    const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                             (c.acc ? " accumulate" : "") + " seed " + std::to_string(seed) + " path " +
                             cpu::gemm::selected_path().name();
    const auto x = random_vector(c.m * c.k, seed), w = random_vector(c.n * c.k, seed + 7919);
    const auto y0 = random_vector(c.m * c.n, seed + 31337);
    std::vector<float> y = y0;
    cpu::matmul_nt(c.m, c.n, c.k, x.data(), w.data(), y.data(), c.acc);
    std::string first;
    const double r = worst_ratio(c.m, c.n, c.k, x, w, y0, c.acc, y, &first);
    std::printf("[agreement] %s: worst error / bound %.3g\n", what.c_str(), r);
    EXPECT_LE(r, 1.0) << what << ": " << first;

    // Negative control 1: x's last column zeroed, so every dot misses its last product.
    std::vector<float> x_short = x;
    for (int64_t i = 0; i < c.m; ++i) x_short[i * c.k + c.k - 1] = 0.0f;
    std::vector<float> y_short = y0;
    cpu::matmul_nt(c.m, c.n, c.k, x_short.data(), w.data(), y_short.data(), c.acc);
    std::string ignored;
    const double r_short = worst_ratio(c.m, c.n, c.k, x, w, y0, c.acc, y_short, &ignored);
    std::printf("[negative control] %s, last product dropped: worst error / bound %.3g (must exceed 1)\n",
                what.c_str(), r_short);
    EXPECT_GT(r_short, 1.0) << what << ": dropping a product passes the bound";

    // Negative control 2 (accumulating shapes): y overwritten instead of added to.
    if (c.acc) {
      std::vector<float> y_over = y0;
      cpu::matmul_nt(c.m, c.n, c.k, x.data(), w.data(), y_over.data(), false);
      const double r_over = worst_ratio(c.m, c.n, c.k, x, w, y0, true, y_over, &ignored);
      std::printf("[negative control] %s, accumulate ignored: worst error / bound %.3g (must exceed 1)\n",
                  what.c_str(), r_over);
      EXPECT_GT(r_over, 1.0) << what << ": ignoring accumulate passes the bound";
    }
  }
}

// Every path this machine has, against the twin. Tolerance 1e-5 relative L2: f32 sums of at
// most 600 products of O(1) values (the twin sums in double).
TEST(GemmPaths, MatchTwinOnOddShapes) {
  std::vector<cpu::gemm::GemmPath*> paths = {cpu::gemm::builtin()};
  if (auto* p = cpu::gemm::onednn(nullptr)) paths.push_back(p);
  if (auto* p = cpu::gemm::OpenBlas::get(nullptr)) paths.push_back(p);
  if (auto* p = cpu::gemm::blis(nullptr)) paths.push_back(p);
  (void)cpu::gemm_info();  // selection first: it may force the OpenBLAS core
  const int64_t ms[] = {1, 2, 7, 8, 16, 33}, ns[] = {1, 17, 130}, ks[] = {1, 15, 600};
  uint32_t seed = 100;
  for (auto* path : paths) {
    for (int64_t m : ms)
      for (int64_t n : ns)
        for (int64_t k : ks)
          for (bool acc : {false, true}) {
            ++seed;
            const auto x = random_vector(m * k, seed), w = random_vector(n * k, seed + 7919);
            auto y = random_vector(m * n, seed + 31337);
            const auto want = matmul_nt_twin(m, n, k, x, w, y, acc);
            path->matmul_nt(m, n, k, x.data(), w.data(), y.data(), acc ? 1.0f : 0.0f);
            const std::string what = path->name() + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                      " k=" + std::to_string(k) + (acc ? " accumulate" : "");
            ASSERT_TRUE(close(what, y, want, {m, n}, 1e-5, seed));
          }
  }
}

// Every instruction set's copy of the built-in kernel this CPU runs, not only the one a run
// takes (DAYZERO_CPU_ISA picks among them): each against the twin within 1e-5 as above, at
// m <= 16 (the small-M tiles) and above (the k-blocked tiles), and each as stored (bf16) with
// the bits of its own f32 product. The copies' tiles and vector widths differ, so two copies
// give other bits somewhere: the negative control that the tests under each copy test another
// summation order.
TEST(GemmBuiltinIsa, EveryInstructionSetThisCpuRunsMatchesTheTwin) {
  int runnable = 0;
  std::vector<std::vector<float>> outputs;
  const int64_t n = 45, k = 1537;
  for (const auto& isa : cpu::gemm::builtin_isas()) {
    if (!cpu::gemm::cpu_runs(isa)) continue;
    ++runnable;
    const cpu::gemm::BuiltinKernels& kernels = isa.kernels();
    ASSERT_STREQ(kernels.isa, isa.name);
    ASSERT_NE(kernels.path->name().find(isa.name), std::string::npos) << kernels.path->name();
    for (int64_t m : {1, 5, 16, 33}) {
      const auto x = random_vector(m * k, 300 + m), w = random_vector(n * k, 301);
      std::vector<float> y(m * n);
      kernels.path->matmul_nt(m, n, k, x.data(), w.data(), y.data(), 0.0f);
      const std::string what = std::string(isa.name) + " m=" + std::to_string(m);
      EXPECT_TRUE(close(what, y, matmul_nt_twin(m, n, k, x, w, y, false), {m, n}, 1e-5, 300));
      if (m == 5) outputs.push_back(y);
      if (m > 16) continue;
      std::vector<uint16_t> w16(w.size());
      std::vector<float> wide(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &w[i], 4);
        w16[i] = static_cast<uint16_t>(bits >> 16);
        bits = uint32_t{w16[i]} << 16;
        std::memcpy(&wide[i], &bits, 4);
      }
      std::vector<float> as_stored(m * n), widened(m * n);
      kernels.matmul_nt_small_bf16(m, n, k, x.data(), w16.data(), as_stored.data(), 0.0f);
      kernels.path->matmul_nt(m, n, k, x.data(), wide.data(), widened.data(), 0.0f);
      EXPECT_TRUE(identical(what + " bf16 as stored", as_stored, widened, {m, n}));
    }
  }
  EXPECT_GE(runnable, 1) << "the generic copy runs on every x86-64 CPU";
  bool differ = false;
  for (size_t i = 1; i < outputs.size(); ++i) differ |= outputs[i] != outputs[0];
  if (outputs.size() >= 2) {
    EXPECT_TRUE(differ) << "every instruction set summed in the same order";
  }
}

// A path asked for by name that this process cannot run is refused with the variable named,
// never replaced by another path in silence.
TEST(GemmBuiltinIsa, RequestsThatCannotBeHonouredAreRefused) {
  struct Case {
    const char* var;
    const char* value;
    const char* says;
  };
  for (const Case& c : {Case{"DAYZERO_CPU_ISA", "avx1024", "DAYZERO_CPU_ISA=avx1024 is not one of"},
                        Case{"DAYZERO_GEMM_LARGE_M", "mkl", "DAYZERO_GEMM_LARGE_M=mkl is not one of"},
                        Case{"DAYZERO_GEMM", "cublas", "DAYZERO_GEMM=cublas is not one of"}}) {
    const char* before = std::getenv(c.var);
    const std::string saved = before ? before : "";
    setenv(c.var, c.value, 1);
    const std::string why = cpu::gemm::kernel_path_request_error();
    if (before) setenv(c.var, saved.c_str(), 1);
    else unsetenv(c.var);
    EXPECT_NE(why.find(c.says), std::string::npos) << c.var << ": " << why;
  }
  if (std::getenv("DAYZERO_CPU_ISA") || std::getenv("DAYZERO_GEMM") || std::getenv("DAYZERO_GEMM_LARGE_M"))
    GTEST_SKIP() << "the environment pins a path: the rest checks the unpinned default";
  EXPECT_EQ(cpu::gemm::kernel_path_request_error(), "");
  for (const auto& isa : cpu::gemm::builtin_isas()) {
    if (cpu::gemm::cpu_runs(isa)) continue;
    setenv("DAYZERO_CPU_ISA", isa.name, 1);
    const std::string why = cpu::gemm::kernel_path_request_error();
    unsetenv("DAYZERO_CPU_ISA");
    EXPECT_NE(why.find("cannot run"), std::string::npos) << isa.name << ": " << why;
  }
}

// A decode-sized product (m = 1, k = 4096) and a prefill-sized one through ops.h.
// Tolerance 2e-5: f32 sums of 4096 products.
TEST(GemmPaths, LlmShapesThroughOps) {
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{1, 1024, 4096}, Case{16, 256, 2816}}) {
    const uint32_t seed = 7;
    const auto x = random_vector(c.m * c.k, seed), w = random_vector(c.n * c.k, seed + 1);
    std::vector<float> y(c.m * c.n);
    cpu::matmul_nt(c.m, c.n, c.k, x.data(), w.data(), y.data());
    EXPECT_TRUE(close("matmul_nt m=" + std::to_string(c.m), y, matmul_nt_twin(c.m, c.n, c.k, x, w, y, false), {c.m, c.n},
                      2e-5, seed));
  }
}

TEST(GemmOps, EmptyAndZeroK) {
  std::vector<float> y = {1, 2, 3, 4};
  cpu::matmul_nt(2, 2, 0, nullptr, nullptr, y.data(), /*accumulate=*/true);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
  cpu::matmul_nt(2, 2, 0, nullptr, nullptr, y.data());
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 0}));
  cpu::matmul_nt(0, 2, 3, nullptr, nullptr, nullptr);  // nothing to touch
}

TEST(GemmOps, AccumulateAddsToY) {
  const int64_t m = 3, n = 5, k = 9;
  const auto x = random_vector(m * k, 1), w = random_vector(n * k, 2);
  std::vector<float> y(m * n, 0.5f);
  const auto want = matmul_nt_twin(m, n, k, x, w, y, true);
  cpu::matmul_nt(m, n, k, x.data(), w.data(), y.data(), true);
  EXPECT_TRUE(close("accumulate", y, want, {m, n}, 1e-6, 1));  // 9 terms: f32 rounding only
}

// The rule by rows: m <= 16 runs the built-in kernel, m > 16 the large-M path. Checked by
// bits against each path called directly (the paths differ in the last bits at these k, so
// a wrong route shows; the negative control asserts that they do differ).
TEST(GemmSelection, SmallMRunsTheBuiltinKernelAndTheRestTheLargePath) {
  if (std::getenv("DAYZERO_GEMM")) GTEST_SKIP() << "DAYZERO_GEMM runs one path at every m";
  const int64_t n = 96, k = 1000;
  auto* large = cpu::gemm::OpenBlas::get(nullptr);
  const std::string& path = cpu::gemm_info().path;
  ASSERT_EQ(path.rfind("builtin", 0), 0u) << path;
  ASSERT_NE(path.find(" at m <= 16; "), std::string::npos) << path;
  if (!large || path.find("; openblas") == std::string::npos)
    GTEST_SKIP() << "large-M path is not OpenBLAS here: " << path;
  auto* own = cpu::gemm::builtin();
  bool some_differ = false;
  for (int64_t m : {1, 2, 8, 16, 17, 64}) {
    const auto x = random_vector(m * k, 40 + m), w = random_vector(n * k, 41);
    std::vector<float> got(m * n), small(m * n), big(m * n);
    cpu::matmul_nt(m, n, k, x.data(), w.data(), got.data());
    own->matmul_nt(m, n, k, x.data(), w.data(), small.data(), 0.0f);
    large->matmul_nt(m, n, k, x.data(), w.data(), big.data(), 0.0f);
    const bool want_small = m <= 16;
    EXPECT_TRUE(identical("m=" + std::to_string(m), got, want_small ? small : big, {m, n}));
    some_differ |= small != big;
  }
  EXPECT_TRUE(some_differ) << "builtin and OpenBLAS gave the same bits everywhere: the check cannot see a wrong route";
}

// At m <= 16 each y element is summed in the same order whatever m is (the tiles differ only
// in how many rows share a w load), so a decode row gets the same bits alone or in a batch.
TEST(GemmBuiltin, SmallMRowsDoNotDependOnTheBatch) {
  const int64_t n = 200, k = 1537;  // k with a scalar tail
  const auto x = random_vector(16 * k, 90), w = random_vector(n * k, 91);
  std::vector<float> batch(16 * n);
  cpu::gemm::builtin()->matmul_nt(16, n, k, x.data(), w.data(), batch.data(), 0.0f);
  for (int64_t m : {1, 3, 8}) {
    std::vector<float> few(m * n);
    cpu::gemm::builtin()->matmul_nt(m, n, k, x.data(), w.data(), few.data(), 0.0f);
    EXPECT_TRUE(identical("rows 0.." + std::to_string(m - 1), few,
                          std::vector<float>(batch.begin(), batch.begin() + m * n), {m, n}));
  }
}

// Where the small-M kernel prefetches to (L1 or L2) changes no bits, at m = 1 and in a batch,
// f32 and bf16; the kernel's name says which it runs.
TEST(GemmBuiltin, PrefetchLevelChangesNoBits) {
  const auto before = cpu::gemm::small_m_prefetch_level();
  const int64_t n = 130, k = 1537;
  const auto x = random_vector(8 * k, 92), w = random_vector(n * k, 93);
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], 4);
    w16[i] = static_cast<uint16_t>(bits >> 16);
  }
  for (int64_t m : {1, 8}) {
    std::vector<float> f32[2], bf16[2];
    for (int level = 0; level < 2; ++level) {
      const auto l = level ? cpu::gemm::SmallMPrefetchLevel::kL2 : cpu::gemm::SmallMPrefetchLevel::kL1;
      cpu::gemm::set_small_m_prefetch_level(l);
      EXPECT_NE(cpu::gemm::builtin()->name().find(std::string("prefetch to ") + cpu::gemm::prefetch_level_name(l)),
                std::string::npos);
      f32[level].resize(m * n);
      bf16[level].resize(m * n);
      cpu::gemm::builtin()->matmul_nt(m, n, k, x.data(), w.data(), f32[level].data(), 0.0f);
      cpu::gemm::matmul_nt_small_bf16(m, n, k, x.data(), w16.data(), bf16[level].data(), 0.0f);
    }
    EXPECT_TRUE(identical("f32 m " + std::to_string(m), f32[0], f32[1], {m, n}));
    EXPECT_TRUE(identical("bf16 m " + std::to_string(m), bf16[0], bf16[1], {m, n}));
  }
  cpu::gemm::set_small_m_prefetch_level(before);
}

// Same inputs and thread count -> same bits, for 1 and 2 threads; the built-in path gives
// the same bits whatever the thread count.
TEST(GemmDeterminism, RepeatableAtEachThreadCount) {
  const int64_t m = 64, n = 520, k = 700;
  const auto x = random_vector(m * k, 3), w = random_vector(n * k, 4);
  for (int threads : {1, 2}) {
    cpu::gemm_set_threads(threads);
    EXPECT_EQ(cpu::gemm_info().threads, threads);
    EXPECT_EQ(cpu::kernel_threads(), threads);
    for (int64_t rows : {m, int64_t{8}}) {  // the large-M and the small-M path
      std::vector<float> a(rows * n), b(rows * n);
      cpu::matmul_nt(rows, n, k, x.data(), w.data(), a.data());
      cpu::matmul_nt(rows, n, k, x.data(), w.data(), b.data());
      EXPECT_TRUE(identical("threads " + std::to_string(threads) + " m " + std::to_string(rows), a, b, {rows, n}));
    }
  }
  std::vector<float> one(m * n), two(m * n);
  for (int threads : {1, 2}) {
    cpu::gemm_set_threads(threads);
    cpu::gemm::builtin()->matmul_nt(m, n, k, x.data(), w.data(), (threads == 1 ? one : two).data(), 0.0f);
  }
  EXPECT_TRUE(identical("builtin 1 vs 2 threads", one, two, {m, n}));
  for (int64_t rows : {int64_t{1}, int64_t{8}}) {  // the small-M tiles
    std::vector<float> a(rows * n), b(rows * n);
    cpu::gemm_set_threads(1);
    cpu::gemm::builtin()->matmul_nt(rows, n, k, x.data(), w.data(), a.data(), 0.0f);
    cpu::gemm_set_threads(3);
    cpu::gemm::builtin()->matmul_nt(rows, n, k, x.data(), w.data(), b.data(), 0.0f);
    EXPECT_TRUE(identical("builtin m " + std::to_string(rows) + " 1 vs 3 threads", a, b, {rows, n}));
  }
  cpu::gemm_set_threads(1);
}

// The mechanism that repairs a misdetected core, exercised with cores this CPU can run:
// force each, check results, then put back the core the selection chose.
TEST(GemmOpenBlas, ForcingACoreWorksAndIsReversible) {
  auto* lib = cpu::gemm::OpenBlas::get(nullptr);
  if (!lib) GTEST_SKIP() << "libopenblas not loadable here";
  (void)cpu::gemm_info();
  const std::string chosen = lib->core();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::string user_before = user ? user : "(unset)";
  std::vector<std::string> cores = {"Prescott"};
  if (cpu::gemm::detect_isa().best >= IsaClass::kAvx2) cores.push_back("Haswell");
  for (const std::string& core : cores) {
    std::string why, detail;
    ASSERT_TRUE(lib->force_core(core, &why)) << why;
    EXPECT_EQ(lib->core(), core);
    EXPECT_TRUE(cpu::gemm::verify_path(*lib, &detail)) << detail;
  }
  std::string why;
  ASSERT_TRUE(lib->force_core(chosen, &why)) << why;
  EXPECT_EQ(lib->core(), chosen);
  user = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(user ? user : "(unset)", user_before) << "forcing must leave the user's variable as it was";
}

}  // namespace
}  // namespace dayzero::kernels
