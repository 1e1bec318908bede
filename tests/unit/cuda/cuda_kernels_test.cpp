// Every CUDA op against its CPU twin (STYLE.md: each kernel is validated against a plain-loop
// twin): the Backend ops of the CUDA backend against the CPU backend on the same seeded inputs,
// in f32 and with bf16 weights (the CPU side then computes on the bf16-rounded values, so the
// bound sees accumulation order only, and a negative control shows it would see the rounding),
// plus the kernels behind no Backend op (dtype conversion, FP8 block dequantisation, softmax,
// argmax), the MoE router (ids equal, weights to the rounding of exp). The bound is written beside each case with its reason. Skips where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/stored_weight.h"
#include "core/stored_format.h"
#include "core/dtype.h"
#include "kernels/cuda/ops.h"
#include "kernels/ops.h"
#include "tests/unit/cuda/gpu_visible.h"

namespace dayzero {
namespace {

constexpr uint32_t kSeed = 20261201;

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

Tensor host_of(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::host(DType::kF32, std::move(shape));
  DZ_CHECK(static_cast<size_t>(t.numel()) == v.size());
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> values(const Tensor& host) {
  return std::vector<float>(host.f32(), host.f32() + host.numel());
}

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }
std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = bf16_round(x);
  return v;
}

// Relative L2 error of got against want (f64 sums); the first mismatch is printed by the caller.
double rel_l2(const std::vector<float>& want, const std::vector<float>& got) {
  EXPECT_EQ(want.size(), got.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::string first_mismatch(const std::vector<float>& want, const std::vector<float>& got) {
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    if (want[i] != got[i] && !(std::isnan(want[i]) && std::isnan(got[i])))
      return "first difference at [" + std::to_string(i) + "]: want " + std::to_string(want[i]) + ", got " +
             std::to_string(got[i]) + " (seed " + std::to_string(kSeed) + ")";
  return "no element differs";
}

// The measured rel_l2 printed whether it passes or not ("measured rel_l2 <test>:<line> <value>
// (bound <b>)"), so one GPU run gives every figure the bounds are to be set from; gtest prints it
// beside the bound on a failure, and the first differing element follows.
double measured_rel_l2(const std::vector<float>& want, const std::vector<float>& got, double bound, int line) {
  const double e = rel_l2(want, got);
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("measured rel_l2 %s:%d %.3g (bound %.3g)\n", info ? info->name() : "?", line, e, bound);
  return e;
}
#define EXPECT_CLOSE(want, got, bound) \
  EXPECT_LE(measured_rel_l2(want, got, bound, __LINE__), bound) << first_mismatch(want, got) << "; "

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test_util::why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    backend::BackendOptions c;
    c.kind = "cpu";
    c.threads = 1;
    auto cpu = backend::make_backend(c);
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    cpu_ = std::move(cpu).value();
    backend::BackendOptions g;
    g.kind = "cuda";
    g.compute_dtype = DType::kF32;
    auto f32 = backend::make_backend(g);
    ASSERT_TRUE(f32.ok()) << f32.status().message();
    gpu_ = std::move(f32).value();
    g.compute_dtype = DType::kBF16;
    auto bf16 = backend::make_backend(g);
    ASSERT_TRUE(bf16.ok()) << bf16.status().message();
    gpu_bf16_ = std::move(bf16).value();
  }

  std::vector<float> back(backend::Backend& be, const Tensor& d) {
    Tensor h = Tensor::host(DType::kF32, d.shape());
    be.to_host(d, h);
    return values(h);
  }

  std::unique_ptr<backend::Backend> cpu_, gpu_, gpu_bf16_;
};

TEST_F(CudaVsCpu, DeviceAndName) {
  EXPECT_EQ(gpu_->name(), "cuda");
  EXPECT_FALSE(gpu_->device().is_cpu());
  EXPECT_NE(gpu_bf16_->describe().find("bfloat16"), std::string::npos) << gpu_bf16_->describe();
}

// f32 GEMM (pedantic, no TF32) vs the CPU GEMM: summation order only, k = 96 terms of ~1:
// agreement ~1e-7 expected; bound 2e-6 (a TF32 GEMM would be ~1e-3 off). m = 1 (decode) and m = 5, with and without accumulate.
TEST_F(CudaVsCpu, MatmulF32) {
  for (int64_t m : {1, 5}) {
    const int64_t n = 48, k = 96;
    const auto x = random_values(m * k, kSeed + 1), w = random_values(n * k, kSeed + 2),
               y0 = random_values(m * n, kSeed + 3);
    for (bool acc : {false, true}) {
      Tensor yc = host_of(y0, {m, n});
      cpu_->matmul(host_of(x, {m, k}), host_of(w, {n, k}), yc, acc);
      Tensor yg = gpu_->to_device(host_of(y0, {m, n}));
      gpu_->matmul(gpu_->to_device(host_of(x, {m, k})), gpu_->to_device_weight(host_of(w, {n, k})), yg, acc);
      EXPECT_CLOSE(values(yc), back(*gpu_, yg), 2e-6) << "m " << m << " accumulate " << acc;
    }
  }
}

// bf16 GEMM (bf16 x and w, f32 accumulation) vs the CPU GEMM on the bf16-rounded x and w: the
// products are exact in f32, so only the order differs (~1e-7 expected); bound 2e-6. Negative control: against
// the unrounded inputs the error is ~3e-3 (the bf16 rounding), far above the bound.
TEST_F(CudaVsCpu, MatmulBf16) {
  const int64_t m = 7, n = 64, k = 128;
  const auto x = random_values(m * k, kSeed + 4), w = random_values(n * k, kSeed + 5);
  Tensor wd = gpu_bf16_->to_device_weight(host_of(w, {n, k}));
  EXPECT_EQ(wd.dtype(), DType::kBF16);
  Tensor yg = gpu_bf16_->empty(DType::kF32, {m, n});
  gpu_bf16_->matmul(gpu_bf16_->to_device(host_of(x, {m, k})), wd, yg, false);
  const auto got = back(*gpu_bf16_, yg);
  Tensor yr = Tensor::host(DType::kF32, {m, n});
  cpu_->matmul(host_of(bf16_rounded(x), {m, k}), host_of(bf16_rounded(w), {n, k}), yr, false);
  EXPECT_CLOSE(values(yr), got, 2e-6);
  Tensor yu = Tensor::host(DType::kF32, {m, n});
  cpu_->matmul(host_of(x, {m, k}), host_of(w, {n, k}), yu, false);
  EXPECT_GT(rel_l2(values(yu), got), 1e-4) << "the bf16 path rounds nothing";
}

// A bf16 weight read back widens exactly; vectors stay f32.
TEST_F(CudaVsCpu, WeightsKeptInComputeDtype) {
  const auto w = random_values(6 * 10, kSeed + 6);
  Tensor wd = gpu_bf16_->to_device_weight(host_of(w, {6, 10}));
  EXPECT_EQ(back(*gpu_bf16_, wd), bf16_rounded(w));
  Tensor vd = gpu_bf16_->to_device_weight(host_of(w, {60}));
  EXPECT_EQ(vd.dtype(), DType::kF32);
  EXPECT_EQ(back(*gpu_bf16_, vd), w);
  // Larger than one staging buffer (32 MiB of f32): the double-buffered path with several chunks.
  const auto big = random_values(size_t{9} << 20, kSeed + 7);
  Tensor bd = gpu_bf16_->to_device_weight(host_of(big, {9, 1 << 20}));
  EXPECT_EQ(back(*gpu_bf16_, bd), bf16_rounded(big));
  Tensor bf = gpu_->to_device_weight(host_of(big, {9, 1 << 20}));
  EXPECT_EQ(back(*gpu_, bf), big);
}

// A block-scaled FP8 weight slice kept as stored, as the loader hands it over: rows [r0, r1) or
// columns [c0, c1) of a [40, 72] E4M3 weight in blocks of 16 x 32 (partial last blocks), with
// the scale blocks that cover it. want: the host dequantisation of the slice (one f32 multiply).
struct Fp8Case {
  std::vector<uint8_t> bytes;  // [rows, cols]
  std::vector<float> scale;    // [scale_rows, scale_cols]
  StoredSlice slice;
  std::vector<float> want;     // [rows, cols]
  std::vector<float> misplaced;  // the same with the slice's offset into its first block ignored
};
Fp8Case fp8_case(int dim, int64_t begin, int64_t end) {
  constexpr int64_t R = 40, C = 72, br = 16, bc = 32, sr = 3, sc = 3;
  std::vector<uint8_t> q(R * C);
  std::mt19937 rng(kSeed + 40);
  for (auto& b : q) {
    b = static_cast<uint8_t>(rng() & 0xff);
    if ((b & 0x7f) == 0x7f) b = 0x38;  // no NaN encodings
  }
  std::vector<float> s(sr * sc);
  for (size_t i = 0; i < s.size(); ++i) s[i] = 0.25f + 0.5f * static_cast<float>(i);  // distinct per block
  Fp8Case c;
  c.slice = {&stored_format(StoredScheme::kFp8Block), R, C, 0, 0, br, bc};
  if (dim == 0) c.slice.row0 = begin, c.slice.rows = end - begin;
  if (dim == 1) c.slice.col0 = begin, c.slice.cols = end - begin;
  const StoredSlice& sl = c.slice;
  const int64_t b0 = sl.row0 / br, k0 = sl.col0 / bc;
  for (int64_t i = 0; i < sl.scale_rows(); ++i)
    for (int64_t j = 0; j < sl.scale_cols(); ++j) c.scale.push_back(s[(b0 + i) * sc + k0 + j]);
  for (int64_t i = 0; i < sl.rows; ++i)
    for (int64_t j = 0; j < sl.cols; ++j) {
      const uint8_t b = q[(sl.row0 + i) * C + sl.col0 + j];
      c.bytes.push_back(b);
      c.want.push_back(f8_e4m3_to_f32(b) * s[((sl.row0 + i) / br) * sc + (sl.col0 + j) / bc]);
      c.misplaced.push_back(f8_e4m3_to_f32(b) * c.scale[(i / br) * sl.scale_cols() + j / bc]);
    }
  return c;
}
Tensor fp8_weight(backend::Backend& be, const Fp8Case& c) {
  Tensor b = Tensor::host(DType::kF8_E4M3, {c.slice.rows, c.slice.cols});
  std::memcpy(b.data(), c.bytes.data(), c.bytes.size());
  Tensor s = host_of(c.scale, {c.slice.scale_rows(), c.slice.scale_cols()});
  return be.to_device_stored({c.slice, b, s});
}

// FP8 kept as stored: one allocation of slice.held_bytes() counted as weight bytes; read back
// dequantised, exactly the host twin (one f32 multiply each side); matmul dequantises into the
// weight workspace first: in f32 compute against the CPU GEMM on the host dequantisation, bound
// 2e-6 (order only, as MatmulF32); in bf16 compute against the CPU GEMM on the bf16-rounded x and
// dequantised w, bound 2e-6 (as MatmulBf16). Slices start inside a block (rows 12.., columns
// 20..). Negative control: the host twin with the slice's offset into its first block ignored
// is far off (> 1e-2), so the bound sees a misplaced scale.
TEST_F(CudaVsCpu, Fp8WeightKeptAsStored) {
  ASSERT_TRUE(gpu_->keeps_stored(StoredScheme::kFp8Block));
  for (auto [dim, b, e] : {std::tuple{0, 12, 36}, {1, 20, 70}, {-1, 0, 0}}) {
    const Fp8Case c = fp8_case(dim, b, e);
    const int64_t n = c.slice.rows, k = c.slice.cols, m = 5;
    const std::string what = "dim " + std::to_string(dim) + " [" + std::to_string(b) + ", " + std::to_string(e) + ")";
    for (backend::Backend* g : {gpu_.get(), gpu_bf16_.get()}) {
      const int64_t before = g->memory_info().weight_bytes;
      {
        Tensor wd = fp8_weight(*g, c);
        EXPECT_EQ(wd.dtype(), DType::kF8_E4M3);
        EXPECT_EQ(g->memory_info().weight_bytes - before, c.slice.held_bytes()) << what;
        EXPECT_EQ(back(*g, wd), c.want) << what;
        const auto x = random_values(m * k, kSeed + 41);
        Tensor yg = g->empty(DType::kF32, {m, n});
        g->matmul(g->to_device(host_of(x, {m, k})), wd, yg, false);
        const auto got = back(*g, yg);
        const bool bf16 = g == gpu_bf16_.get();
        Tensor yr = Tensor::host(DType::kF32, {m, n});
        cpu_->matmul(host_of(bf16 ? bf16_rounded(x) : x, {m, k}), host_of(bf16 ? bf16_rounded(c.want) : c.want, {n, k}),
                     yr, false);
        EXPECT_CLOSE(values(yr), got, 2e-6) << what << (bf16 ? " bf16" : " f32");
        if (dim != -1) {
          Tensor ym = Tensor::host(DType::kF32, {m, n});
          cpu_->matmul(host_of(x, {m, k}), host_of(c.misplaced, {n, k}), ym, false);
          EXPECT_GT(rel_l2(values(ym), got), 1e-2) << what << ": a misplaced scale would pass";
        }
      }
      EXPECT_EQ(g->memory_info().weight_bytes, before) << what << ": the weight's bytes outlive it";
    }
  }
}

// An FP4 weight kept as stored (MXFP4 groups of 32, NVFP4 groups of 16 over a global scale), as
// the loader hands it over: whole, and columns 19..61 (an odd column inside a group: the codes
// moved down a nibble, as load_fp4_as_stored does). One allocation of the table's held_bytes
// counted as weight bytes; read back dequantised, the bits of the CPU's dequantise_stored_rows
// (one f32 multiply each side); matmul (f32 compute) against the CPU GEMM on that
// dequantisation, bound 2e-6 (order only, as MatmulF32). Negative control: the same codes read
// with the next group's scale are far off.
TEST_F(CudaVsCpu, Fp4WeightKeptAsStored) {
  ASSERT_TRUE(gpu_->keeps_stored(StoredScheme::kMxfp4) && gpu_->keeps_stored(StoredScheme::kNvfp4));
  constexpr int64_t R = 40, C = 72;
  for (StoredScheme scheme : {StoredScheme::kMxfp4, StoredScheme::kNvfp4})
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, C}, {19, 61}}) {
      const StoredFormat& f = stored_format(scheme);
      const int64_t g = f.block_cols, cols = c1 - c0;
      const StoredSlice sl{&f, R, cols, 0, c0, 1, g};
      std::mt19937 rng(kSeed + 50);
      std::vector<uint8_t> codes(R * cols), q(static_cast<size_t>(R * sl.value_row_bytes()), 0),
          scale(static_cast<size_t>(R * sl.scale_cols()));
      for (auto& v : codes) v = static_cast<uint8_t>(rng() & 15);
      for (auto& v : scale) v = scheme == StoredScheme::kMxfp4 ? static_cast<uint8_t>(120 + rng() % 16)
                                                               : static_cast<uint8_t>(1 + rng() % 0x7e);
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < cols; ++j)
          q[i * sl.value_row_bytes() + j / 2] |= static_cast<uint8_t>(codes[i * cols + j] << (4 * (j % 2)));
      const float global = scheme == StoredScheme::kNvfp4 ? 2.5f : 1.0f;
      const kernels::cpu::StoredWeight hw{scheme, q.data(), scale.data(), sl.value_row_bytes(), sl.scale_cols(), 0, c0,
                                          1, g, false, global};
      std::vector<float> want(R * cols);
      kernels::cpu::dequantise_stored_rows(hw, cols, 0, R, want.data());
      Tensor qt = Tensor::host(DType::kU8, {R, sl.value_row_bytes()});
      std::memcpy(qt.data(), q.data(), q.size());
      Tensor st = Tensor::host(DType::kU8, {R, sl.scale_cols()});
      std::memcpy(st.data(), scale.data(), scale.size());
      const std::string what = std::string(f.name) + " columns " + std::to_string(c0) + ".." + std::to_string(c1);
      const int64_t before = gpu_->memory_info().weight_bytes;
      {
        Tensor wd = gpu_->to_device_stored({sl, qt, st, global});
        EXPECT_EQ(wd.dtype(), DType::kF4);
        EXPECT_EQ(gpu_->memory_info().weight_bytes - before, sl.held_bytes()) << what;
        EXPECT_EQ(back(*gpu_, wd), want) << what;
        const int64_t m = 5;
        const auto x = random_values(m * cols, kSeed + 51);
        Tensor yg = gpu_->empty(DType::kF32, {m, R});
        gpu_->matmul(gpu_->to_device(host_of(x, {m, cols})), wd, yg, false);
        const auto got = back(*gpu_, yg);
        Tensor yr = Tensor::host(DType::kF32, {m, R});
        cpu_->matmul(host_of(x, {m, cols}), host_of(want, {R, cols}), yr, false);
        EXPECT_CLOSE(values(yr), got, 2e-6) << what;
        std::vector<uint8_t> shifted = scale;  // each row's groups read one to the left
        for (int64_t i = 0; i < R; ++i)
          for (int64_t j = 0; j + 1 < sl.scale_cols(); ++j) shifted[i * sl.scale_cols() + j] = scale[i * sl.scale_cols() + j + 1];
        std::vector<float> off(R * cols);
        kernels::cpu::dequantise_stored_rows({scheme, q.data(), shifted.data(), sl.value_row_bytes(), sl.scale_cols(), 0,
                                              c0, 1, g, false, global},
                                          cols, 0, R, off.data());
        Tensor yo = Tensor::host(DType::kF32, {m, R});
        cpu_->matmul(host_of(x, {m, cols}), host_of(off, {R, cols}), yo, false);
        EXPECT_GT(rel_l2(values(yo), got), 1e-2) << what << ": a misplaced scale would pass";
      }
      EXPECT_EQ(gpu_->memory_info().weight_bytes, before) << what << ": the weight's bytes outlive it";
    }
}

// Weights in the dtype the plan counted, whatever the compute dtype: a bf16 weight under f32
// compute is widened into the workspace (exact), so the f32 GEMM sees the bf16 values: bound
// 2e-6 against the CPU GEMM on the bf16-rounded w (order only). An f32 weight under bf16
// compute runs the f32 GEMM: bound 2e-6 against the unrounded CPU GEMM (bf16 rounding would be ~3e-3).
TEST_F(CudaVsCpu, WeightsKeptAsThePlanCounted) {
  const int64_t m = 3, n = 40, k = 96;
  const auto x = random_values(m * k, kSeed + 42), w = random_values(n * k, kSeed + 43);
  Tensor wb = gpu_->to_device_weight(host_of(w, {n, k}), DType::kBF16);
  EXPECT_EQ(wb.dtype(), DType::kBF16);
  Tensor yg = gpu_->empty(DType::kF32, {m, n});
  gpu_->matmul(gpu_->to_device(host_of(x, {m, k})), wb, yg, false);
  Tensor yr = Tensor::host(DType::kF32, {m, n});
  cpu_->matmul(host_of(x, {m, k}), host_of(bf16_rounded(w), {n, k}), yr, false);
  EXPECT_CLOSE(values(yr), back(*gpu_, yg), 2e-6);
  Tensor wf = gpu_bf16_->to_device_weight(host_of(w, {n, k}), DType::kF32);
  EXPECT_EQ(wf.dtype(), DType::kF32);
  Tensor vb = gpu_bf16_->to_device_weight(host_of(w, {n * k}), DType::kBF16);  // a vector in bf16 too
  EXPECT_EQ(vb.dtype(), DType::kBF16);
  Tensor y2 = gpu_bf16_->empty(DType::kF32, {m, n});
  gpu_bf16_->matmul(gpu_bf16_->to_device(host_of(x, {m, k})), wf, y2, false);
  Tensor yu = Tensor::host(DType::kF32, {m, n});
  cpu_->matmul(host_of(x, {m, k}), host_of(w, {n, k}), yu, false);
  EXPECT_CLOSE(values(yu), back(*gpu_bf16_, y2), 2e-6);
}

// A bf16 checkpoint kept as stored keeps its vectors in bf16 too: RMSNorm and LayerNorm with
// bf16 weight and bias against the CPU on the bf16-rounded vectors, bound 1e-6 as RmsNorm and
// LayerNorm; add_bias exact (one f32 add of the widened value).
TEST_F(CudaVsCpu, Bf16VectorWeights) {
  const int64_t rows = 6, width = 160;
  const auto x = random_values(rows * width, kSeed + 45, 2.0f), w = random_values(width, kSeed + 46),
             b = random_values(width, kSeed + 47);
  const Tensor wr = host_of(bf16_rounded(w), {width}), br = host_of(bf16_rounded(b), {width});
  const Tensor wd = gpu_->to_device_weight(host_of(w, {width}), DType::kBF16);
  const Tensor bd = gpu_->to_device_weight(host_of(b, {width}), DType::kBF16);
  ASSERT_EQ(wd.dtype(), DType::kBF16);
  Tensor yc = Tensor::host(DType::kF32, {rows, width});
  cpu_->rmsnorm(host_of(x, {rows, width}), wr, 1e-6f, yc);
  Tensor yg = gpu_->empty(DType::kF32, {rows, width});
  gpu_->rmsnorm(gpu_->to_device(host_of(x, {rows, width})), wd, 1e-6f, yg);
  EXPECT_CLOSE(values(yc), back(*gpu_, yg), 1e-6) << "rmsnorm";
  Tensor lc = Tensor::host(DType::kF32, {rows, width});
  cpu_->layernorm(host_of(x, {rows, width}), wr, &br, 1e-5f, lc);
  Tensor lg = gpu_->empty(DType::kF32, {rows, width});
  gpu_->layernorm(gpu_->to_device(host_of(x, {rows, width})), wd, &bd, 1e-5f, lg);
  EXPECT_CLOSE(values(lc), back(*gpu_, lg), 1e-6) << "layernorm";
  Tensor ac = host_of(x, {rows, width});
  cpu_->add_bias(br, ac);
  Tensor ag = gpu_->to_device(host_of(x, {rows, width}));
  gpu_->add_bias(bd, ag);
  EXPECT_EQ(values(ac), back(*gpu_, ag));
}

// reserve(): the peak rises by the caches and activations at once, the pool keeps that memory
// (a later allocation of that size takes no more from the device), and a reservation larger
// than the device fails with OutOfMemory and the numbers, not at a prompt.
TEST_F(CudaVsCpu, ReservePreSizesFromThePlan) {
  auto& g = *gpu_bf16_;
  Tensor w = g.to_device_weight(host_of(random_values(64 * 128, kSeed + 44), {64, 128}));
  backend::Reservation r;
  r.max_tokens = 100;
  r.cache_bytes = int64_t{48} << 20;
  r.activation_bytes = int64_t{16} << 20;
  const int64_t peak0 = g.memory_info().peak_bytes;
  ASSERT_TRUE(g.reserve(r).ok());
  const backend::MemoryInfo after = g.memory_info();
  EXPECT_GE(after.peak_bytes, peak0 + r.cache_bytes + r.activation_bytes + r.max_tokens * 128 * 2);
  {
    Tensor kv = g.empty(DType::kF32, {(int64_t{40} << 20) / 4});
    g.synchronize();
    EXPECT_GE(g.memory_info().free_bytes, after.free_bytes - (int64_t{2} << 20))
        << "the pool did not keep the reserved memory";
    EXPECT_EQ(g.memory_info().peak_bytes, after.peak_bytes);
  }
  backend::Reservation huge;
  huge.cache_bytes = after.total_bytes * 2;
  const Status st = g.reserve(huge);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << st.message();
  EXPECT_NE(st.message().find("pre-sizing from the plan needs"), std::string::npos) << st.message();
  // A GEMM workspace the device cannot hold (tokens x 128 in-features x 2 bytes, past the device)
  // is the same exit-3 sentence, not an abort; the backend stays usable (the next GEMM grows it).
  backend::Reservation wide;
  wide.max_tokens = after.total_bytes / 64;
  const Status ws = g.reserve(wide);
  EXPECT_EQ(ws.code(), StatusCode::kOutOfMemory) << ws.message();
  EXPECT_NE(ws.message().find("the activation workspace failed"), std::string::npos) << ws.message();
  Tensor x = g.to_device(host_of(random_values(3 * 128, kSeed + 45), {3, 128}));
  Tensor y = g.empty(DType::kF32, {3, 64});
  g.matmul(x, w, y, false);
  g.synchronize();
}

// A GEMM of zero rows (an expert no token chose) does nothing, as on the CPU.
TEST_F(CudaVsCpu, MatmulOfZeroRows) {
  for (backend::Backend* b : {gpu_.get(), gpu_bf16_.get()}) {
    Tensor w = b->to_device_weight(host_of(random_values(64 * 128, kSeed + 46), {64, 128}));
    Tensor x = b->empty(DType::kF32, {0, 128});
    Tensor y = b->empty(DType::kF32, {0, 64});
    b->matmul(x, w, y, false);
    b->matmul(x, w, y, true);
    b->synchronize();
  }
}

// One f32 add per element on both sides: exact.
TEST_F(CudaVsCpu, AddAndBias) {
  const int64_t rows = 5, width = 33;
  const auto x = random_values(rows * width, kSeed + 8), y = random_values(rows * width, kSeed + 9),
             b = random_values(width, kSeed + 10);
  Tensor yc = host_of(y, {rows, width});
  cpu_->add(host_of(x, {rows, width}), yc);
  cpu_->add_bias(host_of(b, {width}), yc);
  Tensor yg = gpu_->to_device(host_of(y, {rows, width}));
  gpu_->add(gpu_->to_device(host_of(x, {rows, width})), yg);
  gpu_->add_bias(gpu_->to_device(host_of(b, {width})), yg);
  EXPECT_EQ(values(yc), back(*gpu_, yg)) << first_mismatch(values(yc), back(*gpu_, yg));
  // A bf16 weight (a position table) added to f32 activations: the rounded table, exactly.
  Tensor yc2 = host_of(y, {rows, width});
  cpu_->add(host_of(bf16_rounded(x), {rows, width}), yc2);
  Tensor yg2 = gpu_bf16_->to_device(host_of(y, {rows, width}));
  gpu_bf16_->add(gpu_bf16_->to_device_weight(host_of(x, {rows, width})), yg2);
  EXPECT_EQ(values(yc2), back(*gpu_bf16_, yg2));
}

// f32 sum of squares in another order, one sqrt: agreement ~1e-7; bound 1e-6. Negative
// control: eps 1e-2 instead of 1e-6 on inputs of scale 0.05 moves the result by ~5%.
TEST_F(CudaVsCpu, RmsNorm) {
  const int64_t rows = 9, width = 200;
  const auto x = random_values(rows * width, kSeed + 11, 0.05f), w = random_values(width, kSeed + 12);
  Tensor yc = Tensor::host(DType::kF32, {rows, width});
  cpu_->rmsnorm(host_of(x, {rows, width}), host_of(w, {width}), 1e-6f, yc);
  Tensor yg = gpu_->empty(DType::kF32, {rows, width});
  gpu_->rmsnorm(gpu_->to_device(host_of(x, {rows, width})), gpu_->to_device(host_of(w, {width})), 1e-6f, yg);
  const auto got = back(*gpu_, yg);
  EXPECT_CLOSE(values(yc), got, 1e-6);
  Tensor ye = Tensor::host(DType::kF32, {rows, width});
  cpu_->rmsnorm(host_of(x, {rows, width}), host_of(w, {width}), 1e-2f, ye);
  EXPECT_GT(rel_l2(values(ye), got), 1e-3) << "a wrong eps must fail the bound";
}

// f64 reductions on both sides: agreement ~1e-8; bound 1e-6; with and without bias.
TEST_F(CudaVsCpu, LayerNorm) {
  const int64_t rows = 4, width = 300;
  const auto x = random_values(rows * width, kSeed + 13, 3.0f), w = random_values(width, kSeed + 14),
             b = random_values(width, kSeed + 15);
  for (bool bias : {false, true}) {
    Tensor yc = Tensor::host(DType::kF32, {rows, width});
    const Tensor bc = host_of(b, {width});
    cpu_->layernorm(host_of(x, {rows, width}), host_of(w, {width}), bias ? &bc : nullptr, 1e-5f, yc);
    Tensor yg = gpu_->empty(DType::kF32, {rows, width});
    const Tensor bg = gpu_->to_device(bc);
    gpu_->layernorm(gpu_->to_device(host_of(x, {rows, width})), gpu_->to_device(host_of(w, {width})),
                    bias ? &bg : nullptr, 1e-5f, yg);
    EXPECT_CLOSE(values(yc), back(*gpu_, yg), 1e-6) << "bias " << bias;
  }
}

// Same f32 angle, cos/sin in f64 on both sides; the rotation may contract into FMAs on the
// device (1 ulp): bound 1e-6. Positions up to 70000 (long-context angles).
TEST_F(CudaVsCpu, Rope) {
  const int64_t n_tokens = 6, n_head = 4, hd = 64;
  const std::vector<int32_t> pos = {0, 3, 100, 1000, 4095, 70000};
  std::vector<float> inv(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
  const auto x = random_values(n_tokens * n_head * hd, kSeed + 16);
  Tensor ph = Tensor::host(DType::kI32, {n_tokens});
  std::memcpy(ph.data(), pos.data(), pos.size() * 4);
  Tensor xc = host_of(x, {n_tokens, n_head, hd});
  cpu_->rope(xc, ph, host_of(inv, {hd / 2}));
  Tensor xg = gpu_->to_device(host_of(x, {n_tokens, n_head, hd}));
  gpu_->rope(xg, gpu_->to_device(ph), gpu_->to_device(host_of(inv, {hd / 2})));
  EXPECT_CLOSE(values(xc), back(*gpu_, xg), 1e-6);
}

// Causal GQA over a cache: online softmax vs max subtraction, other summation orders:
// agreement ~1e-7; bound 1e-5. Prefill chunk (7 tokens at 5), decode (1 token at 30), and a
// 192-wide head (MLA's nope + rope keys). Negative control: one cache row too many.
TEST_F(CudaVsCpu, AttentionCausal) {
  struct Case {
    int64_t n_tokens, n_head, n_head_kv, hd, pos0;
  };
  const int64_t n_ctx = 40;
  for (const Case c : {Case{7, 8, 2, 64, 5}, Case{1, 8, 2, 64, 30}, Case{3, 4, 4, 192, 10}, Case{2, 6, 1, 40, 0}}) {
    const auto q = random_values(c.n_tokens * c.n_head * c.hd, kSeed + 17),
               k = random_values(n_ctx * c.n_head_kv * c.hd, kSeed + 18),
               v = random_values(n_ctx * c.n_head_kv * c.hd, kSeed + 19);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const Shape qs = {c.n_tokens, c.n_head, c.hd}, ks = {n_ctx, c.n_head_kv, c.hd};
    Tensor oc = Tensor::host(DType::kF32, qs);
    cpu_->attention(host_of(q, qs), host_of(k, ks), host_of(v, ks), c.pos0, scale, oc);
    Tensor og = gpu_->empty(DType::kF32, qs);
    gpu_->attention(gpu_->to_device(host_of(q, qs)), gpu_->to_device(host_of(k, ks)), gpu_->to_device(host_of(v, ks)),
                    c.pos0, scale, og);
    const auto got = back(*gpu_, og);
    EXPECT_CLOSE(values(oc), got, 1e-5) << "tokens " << c.n_tokens << " heads " << c.n_head << "/" << c.n_head_kv
                                        << " head_dim " << c.hd << " pos0 " << c.pos0;
    Tensor on = Tensor::host(DType::kF32, qs);
    cpu_->attention(host_of(q, qs), host_of(k, ks), host_of(v, ks), c.pos0 + 1, scale, on);
    EXPECT_GT(rel_l2(values(on), got), 1e-3) << "an off-by-one mask must fail the bound";
  }
}

// Unmasked encoder attention, head_dim 80 (not a power of two); bound 1e-5 as above.
TEST_F(CudaVsCpu, AttentionFull) {
  const int64_t n = 9, nh = 4, nkv = 2, hd = 80;
  const auto q = random_values(n * nh * hd, kSeed + 20), k = random_values(n * nkv * hd, kSeed + 21),
             v = random_values(n * nkv * hd, kSeed + 22);
  const Shape qs = {n, nh, hd}, ks = {n, nkv, hd};
  Tensor oc = Tensor::host(DType::kF32, qs);
  cpu_->attention_full(host_of(q, qs), host_of(k, ks), host_of(v, ks), 0.1f, oc);
  Tensor og = gpu_->empty(DType::kF32, qs);
  gpu_->attention_full(gpu_->to_device(host_of(q, qs)), gpu_->to_device(host_of(k, ks)),
                       gpu_->to_device(host_of(v, ks)), 0.1f, og);
  EXPECT_CLOSE(values(oc), back(*gpu_, og), 1e-5);
}

// expf/erff/tanhf of the device vs the host library: a few ulp; bound 1e-6.
TEST_F(CudaVsCpu, SwigluAndGelu) {
  const int64_t n = 1000;
  const auto g = random_values(n, kSeed + 23, 6.0f), u = random_values(n, kSeed + 24);
  Tensor oc = Tensor::host(DType::kF32, {n});
  cpu_->swiglu(host_of(g, {n}), host_of(u, {n}), oc);
  Tensor og = gpu_->empty(DType::kF32, {n});
  gpu_->swiglu(gpu_->to_device(host_of(g, {n})), gpu_->to_device(host_of(u, {n})), og);
  EXPECT_CLOSE(values(oc), back(*gpu_, og), 1e-6);
  for (auto kind : {backend::GeluKind::kErf, backend::GeluKind::kTanh, backend::GeluKind::kQuick}) {
    Tensor yc = Tensor::host(DType::kF32, {n});
    cpu_->gelu(kind, host_of(g, {n}), yc);
    Tensor xg = gpu_->to_device(host_of(g, {n}));
    gpu_->gelu(kind, xg, xg);  // in place, as the contract allows
    EXPECT_CLOSE(values(yc), back(*gpu_, xg), 1e-6) << "gelu kind " << static_cast<int>(kind);
  }
}

// A gather: exact, f32 and bf16 tables, ids inside and outside a vocabulary shard.
TEST_F(CudaVsCpu, Embedding) {
  const int64_t rows = 50, width = 32, offset = 10;
  const auto table = random_values(rows * width, kSeed + 25);
  const std::vector<int32_t> ids = {10, 59, 3, 60, 35, 10};
  Tensor ih = Tensor::host(DType::kI32, {6});
  std::memcpy(ih.data(), ids.data(), ids.size() * 4);
  Tensor oc = Tensor::host(DType::kF32, {6, width});
  cpu_->embedding(ih, host_of(table, {rows, width}), offset, oc);
  Tensor og = gpu_->empty(DType::kF32, {6, width});
  gpu_->embedding(gpu_->to_device(ih), gpu_->to_device_weight(host_of(table, {rows, width})), offset, og);
  EXPECT_EQ(values(oc), back(*gpu_, og));
  Tensor ob = Tensor::host(DType::kF32, {6, width});
  cpu_->embedding(ih, host_of(bf16_rounded(table), {rows, width}), offset, ob);
  Tensor gb = gpu_bf16_->empty(DType::kF32, {6, width});
  gpu_bf16_->embedding(gpu_bf16_->to_device(ih), gpu_bf16_->to_device_weight(host_of(table, {rows, width})), offset,
                       gb);
  EXPECT_EQ(values(ob), back(*gpu_bf16_, gb));
}

// Router top-k (route_topk) on the device vs the CPU backend, on the same logits: seeded, and
// rounded to steps of 1/8 so that every row holds exact ties. The kernel takes the CPU's f32
// operations in the CPU's order (sums in index order on one thread) and the same tie rule, so
// ids must be equal and weights equal up to the rounding of exp (f64 rounded once on the
// device, glibc's expf within 0.502 ulp of it: ~6e-8 relative per weight); bound 2e-7 relative
// L2. Ids may differ only where two scores are within an ulp of exp, which these inputs do
// not hold (random floats are ~1e-3 apart; ties are exact). Shapes: Mixtral-like 8 experts,
// Qwen3-MoE 128, and rows longer than the block (300, 1024 experts).
std::vector<float> router_logits(size_t n, uint32_t seed, bool ties) {
  auto v = random_values(n, seed, 2.0f);
  if (ties)
    for (auto& x : v) x = std::round(x * 8) / 8;
  return v;
}

struct RouteResult {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

RouteResult route_on(backend::Backend& be, const std::vector<float>& logits, int64_t n, int64_t ne,
                     const Tensor* bias, const backend::RouterOptions& o) {
  Tensor l = be.to_device(host_of(logits, {n, ne}));
  Tensor ids = be.empty(DType::kI32, {n, o.k}), w = be.empty(DType::kF32, {n, o.k});
  be.route_topk(l, bias, o, ids, w);
  Tensor ih = Tensor::host(DType::kI32, {n, o.k}), wh = Tensor::host(DType::kF32, {n, o.k});
  be.to_host(ids, ih);
  be.to_host(w, wh);
  RouteResult r{std::vector<int32_t>(n * o.k), values(wh)};
  std::memcpy(r.ids.data(), ih.data(), r.ids.size() * 4);
  return r;
}

TEST_F(CudaVsCpu, RouterSoftmax) {
  const int64_t n = 37;
  for (const auto& [ne, k] : {std::pair<int64_t, int64_t>{8, 2}, {128, 8}, {300, 6}, {1024, 8}})
    for (bool ties : {false, true})
      for (bool renorm : {false, true}) {
        const uint32_t seed = kSeed + 40 + static_cast<uint32_t>(ne) + (ties ? 1 : 0);
        const auto l = router_logits(n * ne, seed, ties);
        backend::RouterOptions o;
        o.k = k;
        o.renormalize = renorm;
        const RouteResult c = route_on(*cpu_, l, n, ne, nullptr, o), g = route_on(*gpu_, l, n, ne, nullptr, o);
        EXPECT_EQ(c.ids, g.ids) << "n_expert " << ne << " ties " << ties << " renormalize " << renorm << " seed " << seed;
        EXPECT_CLOSE(c.weights, g.weights, 2e-7) << "n_expert " << ne << " ties " << ties << " renormalize " << renorm;
      }
}

// Group-limited sigmoid routing with a correction bias (f32, and bf16 as a bf16 checkpoint kept
// as stored has it: the CPU then takes the bf16-rounded values in f32, the same numbers), same
// bounds as above. Cases: DeepSeek-V3's 256 experts in 8 groups with 4 kept, k 8; Kimi-K2's
// 384 in one group; groups of one expert; a small one with 4 groups. Negative control: without
// the bias the GPU's ids differ from the CPU's with it (the comparison sees the bias).
TEST_F(CudaVsCpu, RouterSigmoidGrouped) {
  const int64_t n = 37;
  struct Case {
    int64_t ne, k, n_group, topk_group;
  };
  for (const Case c : {Case{256, 8, 8, 4}, Case{384, 8, 1, 1}, Case{16, 2, 16, 3}, Case{64, 6, 4, 2}})
    for (bool ties : {false, true})
      for (DType bias_dtype : {DType::kF32, DType::kBF16}) {
        const uint32_t seed = kSeed + 60 + static_cast<uint32_t>(c.ne + c.n_group) + (ties ? 1 : 0);
        const auto l = router_logits(n * c.ne, seed, ties);
        auto bias = router_logits(c.ne, seed + 1, ties);
        for (auto& b : bias) b *= 0.25f;
        if (bias_dtype == DType::kBF16) bias = bf16_rounded(bias);
        backend::RouterOptions o;
        o.kind = backend::RouterOptions::Kind::kSigmoidGrouped;
        o.k = c.k;
        o.n_group = c.n_group;
        o.topk_group = c.topk_group;
        o.renormalize = true;
        o.scaling = 2.5f;
        const Tensor bc = host_of(bias, {c.ne});
        const Tensor bg = gpu_->to_device_weight(host_of(bias, {c.ne}), bias_dtype);
        ASSERT_EQ(bg.dtype(), bias_dtype);
        const std::string what = "n_expert " + std::to_string(c.ne) + " groups " + std::to_string(c.n_group) + "/" +
                                 std::to_string(c.topk_group) + " ties " + std::to_string(ties) + " bias " +
                                 dtype_name(bias_dtype) + " seed " + std::to_string(seed);
        for (bool renorm : {true, false}) {
          o.renormalize = renorm;
          const RouteResult rc = route_on(*cpu_, l, n, c.ne, &bc, o), rg = route_on(*gpu_, l, n, c.ne, &bg, o);
          EXPECT_EQ(rc.ids, rg.ids) << what << " renormalize " << renorm;
          EXPECT_CLOSE(rc.weights, rg.weights, 2e-7) << what << " renormalize " << renorm;
          if (c.ne == 256 && !ties && renorm) {
            EXPECT_NE(rc.ids, route_on(*gpu_, l, n, c.ne, nullptr, o).ids) << what << ": bias left out";
          }
        }
      }
}

// Kernels without a Backend op, on raw device buffers.
class CudaKernels : public CudaVsCpu {
 protected:
  template <class T>
  T* upload(const std::vector<T>& v) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size() * sizeof(T))), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> download(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void TearDown() override {
    for (void* p : ptrs_) cudaFree(p);
  }
  std::vector<void*> ptrs_;
};

// Round to nearest even, NaN and infinities kept, ties: exactly core/dtype.h's f32_to_bf16.
TEST_F(CudaKernels, ConvertF32Bf16) {
  auto x = random_values(4096, kSeed + 26, 1e4f);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-0.0f);
  x.push_back(1.00390625f);   // halfway between two bf16: ties to even (1.0)
  x.push_back(1.01171875f);   // halfway: ties to even (1.015625)
  x.push_back(3.4e38f);       // above the largest bf16 by more than half a step: +inf
  const float* d = upload(x);
  std::vector<uint16_t> zeros(x.size());
  uint16_t* b = upload(zeros);
  ASSERT_TRUE(kernels::cuda::convert(static_cast<int64_t>(x.size()), kernels::cuda::Elem::kF32, d,
                                     kernels::cuda::Elem::kBF16, b, nullptr).ok());
  const auto got = download(b, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16(x[i])) << "x[" << i << "] = " << x[i];
  std::vector<float> back_f32(x.size());
  float* w = upload(back_f32);
  ASSERT_TRUE(kernels::cuda::convert(static_cast<int64_t>(x.size()), kernels::cuda::Elem::kBF16, b,
                                     kernels::cuda::Elem::kF32, w, nullptr).ok());
  const auto wide = download(w, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(wide[i], bf16_to_f32(got[i])) << i;
}

// FP8 block dequantisation: f32(w) * scale, one multiply, exactly the host twin; a partial
// last block in both dimensions, a slice starting inside a block (row0, col0), both formats
// (all 256 byte values appear).
TEST_F(CudaKernels, DequantFp8Blocks) {
  const int64_t rows = 20, cols = 37, br = 8, bc = 16, row0 = 3, col0 = 5;
  const int64_t srows = (row0 + rows + br - 1) / br, scols = (col0 + cols + bc - 1) / bc;
  std::vector<uint8_t> w(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>((i * 37) & 0xff);
  const auto scale = random_values(srows * scols, kSeed + 27, 4.0f);
  const uint8_t* wd = upload(w);
  const float* sd = upload(scale);
  for (bool e5m2 : {false, true}) {
    std::vector<float> out(rows * cols);
    float* od = upload(out);
    ASSERT_TRUE(kernels::cuda::dequant_fp8_blocks(rows, cols, wd, e5m2, sd, scols, br, bc, row0, col0,
                                                  kernels::cuda::Elem::kF32, od, nullptr).ok());
    const auto got = download(od, out.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t v = w[r * cols + c];
        const float want = (e5m2 ? f8_e5m2_to_f32(v) : f8_e4m3_to_f32(v)) *
                           scale[((row0 + r) / br) * scols + (col0 + c) / bc];
        const float g = got[r * cols + c];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(g)) << r << "," << c;
        } else {
          ASSERT_EQ(g, want) << "e5m2 " << e5m2 << " [" << r << ", " << c << "] byte " << int(v);
        }
      }
  }
}

// Row softmax vs an f64 twin: bound 1e-6 (expf and the f32 sum).
TEST_F(CudaKernels, SoftmaxRows) {
  const int64_t rows = 3, width = 1000;
  const auto x = random_values(rows * width, kSeed + 28, 20.0f);
  float* d = upload(x);
  ASSERT_TRUE(kernels::cuda::softmax_rows(rows, width, d, nullptr).ok());
  const auto got = download(d, x.size());
  std::vector<float> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < width; ++i) mx = std::max(mx, double(x[r * width + i]));
    for (int64_t i = 0; i < width; ++i) sum += std::exp(double(x[r * width + i]) - mx);
    for (int64_t i = 0; i < width; ++i) want[r * width + i] = static_cast<float>(std::exp(x[r * width + i] - mx) / sum);
  }
  EXPECT_CLOSE(want, got, 1e-6);
}

// argmax: exactly kernels::cpu::argmax, ties to the lowest index, NaN never wins.
TEST_F(CudaKernels, Argmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows = {random_values(50000, kSeed + 29), {1, 3, 3, 2}, {nan, 2, nan, 2},
                                          {nan, nan}, {-1}};
  rows[0][31337] = 5.0f;
  rows[0][40000] = 5.0f;
  for (const auto& row : rows) {
    const float* d = upload(row);
    int64_t* idx = upload(std::vector<int64_t>{-1});
    ASSERT_TRUE(kernels::cuda::argmax(static_cast<int64_t>(row.size()), d, idx, nullptr).ok());
    EXPECT_EQ(download(idx, 1)[0], kernels::cpu::argmax(static_cast<int64_t>(row.size()), row.data()))
        << "row of " << row.size();
  }
}

}  // namespace
}  // namespace dayzero
