// Internal to kernels/cpu: one SIMD vector type for the CPU this file is compiled for
// (AVX-512, AVX2+FMA, or a portable 4-lane fallback) and the reductions built on it.
// Not a general SIMD library: only what the kernels here need. Every reduction sums in a
// fixed order, so a result depends on the inputs alone, never on threads or alignment.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12's AVX-512 intrinsics warn about their own _mm*_undefined_* temporaries wherever
// they are inlined (fixed in later GCC); silence that for the header's lines only, so
// -Werror builds on AVX-512 hosts still pass.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // clang (the fuzz build) has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace dayzero::kernels::cpu::simd {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
inline constexpr const char* kIsaName = "avx512";
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load_scalar(float a) { return _mm512_set1_ps(a); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline float hsum(Vec v) { return _mm512_reduce_add_ps(v); }
// kLanes bf16 values widened to f32 (exact: the bf16 bits are the f32's upper half).
inline Vec load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
// kLanes FP8 bytes as f32 times 2^-8 (E4M3, shift 7) or exactly (E5M2, shift 8), exact: the
// byte's bits below the sign moved up by `shift`, the sign at bit 15, are that f16. The byte is
// sign-extended and shifted: the sign lands at bit 15 and, for E4M3, a copy at bit 14, which
// the mask clears (fp8_f16_mask).
inline int fp8_f16_mask(int shift) { return shift == 7 ? 0xbf80 : 0xffff; }
inline Vec load_fp8(const uint8_t* p, int shift) {
  const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_and_si256(_mm256_sll_epi16(b, _mm_cvtsi32_si128(shift)),
                                     _mm256_set1_epi16(static_cast<short>(fp8_f16_mask(shift))));
  return _mm512_cvtph_ps(h);
}
// kLanes INT4 elements (kLanes / 2 bytes, low nibble first, each stored as q + 8) as f32 q,
// exact: each lane shifts its own nibble down from the 32-bit word that holds it.
inline Vec load_int4(const uint8_t* p) {
  int32_t w[2];
  std::memcpy(w, p, 8);
  const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(w[0])), _mm256_set1_epi32(w[1]), 1);
  const __m512i v = _mm512_srlv_epi32(words, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v, _mm512_set1_epi32(15)), _mm512_set1_epi32(8)));
}
// kLanes E2M1 codes (kLanes / 2 bytes, low nibble first) as their f32 values, exact: each lane
// shifts its own nibble down, as load_int4, and looks it up in the 16 values.
inline Vec load_e2m1(const uint8_t* p) {
  int32_t w[2];
  std::memcpy(w, p, 8);
  const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(w[0])), _mm256_set1_epi32(w[1]), 1);
  const __m512i v = _mm512_srlv_epi32(words, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                                      -3.0f, -4.0f, -6.0f);
  // vpermps reads the low 4 bits of each index: the nibbles above need no mask.
  return _mm512_permutexvar_ps(v, table);
}
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr int kLanes = 8;
inline constexpr const char* kIsaName = "avx2";
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load_scalar(float a) { return _mm256_set1_ps(a); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
#if defined(__F16C__)
// load_fp8 as on AVX-512 (there: why the mask).
inline int fp8_f16_mask(int shift) { return shift == 7 ? 0xbf80 : 0xffff; }
inline Vec load_fp8(const uint8_t* p, int shift) {
  const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i h = _mm_and_si128(_mm_sll_epi16(b, _mm_cvtsi32_si128(shift)),
                                  _mm_set1_epi16(static_cast<short>(fp8_f16_mask(shift))));
  return _mm256_cvtph_ps(h);
}
#else
#define DAYZERO_SIMD_SCALAR_FP8 1
#endif
// load_int4 as on AVX-512: one 32-bit word holds the vector's 8 nibbles.
inline Vec load_int4(const uint8_t* p) {
  // One broadcast load (vbroadcastss: no alignment needed) of the 4 bytes to every lane.
  const __m256i words = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(p)));
  const __m256i v = _mm256_srlv_epi32(words, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, _mm256_set1_epi32(15)), _mm256_set1_epi32(8)));
}
// load_e2m1 as on AVX-512, the magnitude from the low 3 bits of each lane's nibble (the
// permute reads only those), the sign bit moved from bit 3 to bit 31.
inline Vec load_e2m1(const uint8_t* p) {
  const __m256i words = _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(p)));
  const __m256i v = _mm256_srlv_epi32(words, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  const __m256 mag = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), v);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(8)), 28);
  return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline float hsum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#else
inline constexpr int kLanes = 4;
inline constexpr const char* kIsaName = "generic";
struct Vec {
  float v[4];
};
inline Vec zero() { return Vec{{0.f, 0.f, 0.f, 0.f}}; }
inline Vec load(const float* p) {
  Vec r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline Vec load_scalar(float a) { return Vec{{a, a, a, a}}; }
inline void store(float* p, Vec a) { std::memcpy(p, a.v, sizeof a.v); }
inline Vec fma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < 4; ++i) c.v[i] += a.v[i] * b.v[i];
  return c;
}
inline Vec add(Vec a, Vec b) {
  for (int i = 0; i < 4; ++i) a.v[i] += b.v[i];
  return a;
}
inline float hsum(Vec a) { return (a.v[0] + a.v[2]) + (a.v[1] + a.v[3]); }
inline Vec load_bf16(const uint16_t* p) {
  Vec r;
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
    std::memcpy(&r.v[i], &bits, 4);
  }
  return r;
}
inline Vec mul(Vec a, Vec b) {
  for (int i = 0; i < 4; ++i) a.v[i] *= b.v[i];
  return a;
}
#define DAYZERO_SIMD_SCALAR_FP8 1
#define DAYZERO_SIMD_SCALAR_INT4 1
#define DAYZERO_SIMD_SCALAR_E2M1 1
#endif

// The 16 E2M1 values by code (core/stored_format.h e2m1_to_f32), and element p of an FP4 row
// (two a byte, low nibble first) as its value.
inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline float e2m1_at(const uint8_t* row, int64_t p) { return kE2m1Values[(row[p >> 1] >> (4 * (p & 1))) & 15]; }
#if defined(DAYZERO_SIMD_SCALAR_E2M1)
inline Vec load_e2m1(const uint8_t* p) {
  float v[kLanes];
  for (int i = 0; i < kLanes; ++i) v[i] = e2m1_at(p, i);
  return load(v);
}
#endif

// Element p of an INT4 row (two a byte, low nibble first, each stored as q + 8) as q.
inline int int4_at(const uint8_t* row, int64_t p) { return ((row[p >> 1] >> (4 * (p & 1))) & 15) - 8; }
#if defined(DAYZERO_SIMD_SCALAR_INT4)
inline Vec load_int4(const uint8_t* p) {
  float v[kLanes];
  for (int i = 0; i < kLanes; ++i) v[i] = static_cast<float>(int4_at(p, i));
  return load(v);
}
#endif

// An f16 (its bits) as f32: exact.
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float f = static_cast<float>(m) * 0x1p-24f;  // subnormal (or zero): exact
    return (h & 0x8000u) ? -f : f;
  }
  const uint32_t bits = (static_cast<uint32_t>(h & 0x8000u) << 16) |
                        (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// One FP8 byte as load_fp8 converts it: its value times 2^-8 (E4M3, shift 7) or its value (E5M2,
// shift 8), exact.
inline float fp8_bits_to_f32(uint8_t b, int shift) {
  return f16_bits_to_f32(static_cast<uint16_t>(((b & 0x7fu) << shift) | ((b & 0x80u) << 8)));
}
#if defined(DAYZERO_SIMD_SCALAR_FP8)
inline Vec load_fp8(const uint8_t* p, int shift) {
  float v[kLanes];
  for (int i = 0; i < kLanes; ++i) v[i] = fp8_bits_to_f32(p[i], shift);
  return load(v);
}
#endif

// sum_i a[i] * b[i] in f32: two vector accumulators, then the scalar tail.
inline float dot(const float* a, const float* b, int64_t n) {
  Vec s0 = zero(), s1 = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = fma(load(a + i), load(b + i), s0);
    s1 = fma(load(a + i + kLanes), load(b + i + kLanes), s1);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = fma(load(a + i), load(b + i), s0);
  float s = hsum(add(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[i] += a * x[i]: a fused multiply-add in the vector body, the scalar expression in the
// last n % kLanes elements. Which elements those are depends on n alone, never on alignment.
inline void axpy(int64_t n, float a, const float* x, float* y) {
  const Vec av = load_scalar(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, fma(av, load(x + i), load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// dot(a, b_r, n) for the four rows b_r = b + r * stride, sharing the loads of a. Each
// result has exactly the arithmetic of dot(): same accumulators, same order.
inline void dot4(const float* a, const float* b, int64_t stride, int64_t n, float out[4]) {
  Vec s0[4], s1[4];
  for (int r = 0; r < 4; ++r) s0[r] = s1[r] = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const Vec a0 = load(a + i), a1 = load(a + i + kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      s0[r] = fma(a0, load(b + r * stride + i), s0[r]);
      s1[r] = fma(a1, load(b + r * stride + i + kLanes), s1[r]);
    }
  }
  for (; i + kLanes <= n; i += kLanes) {
    const Vec a0 = load(a + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) s0[r] = fma(a0, load(b + r * stride + i), s0[r]);
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum(add(s0[r], s1[r]));
    for (int64_t j = i; j < n; ++j) s += a[j] * b[r * stride + j];
    out[r] = s;
  }
}

// y[i] += a[r] * x[r * stride + i] for r = 0 .. rows-1 in that order: the same bits as
// `rows` calls of axpy(), with y held in a register across the rows instead of stored and
// reloaded after each one.
inline void axpy_rows(int64_t n, int64_t rows, const float* a, const float* x, int64_t stride, float* y) {
  // Eight vectors at a time: eight independent FMA chains hide the FMA latency.
  constexpr int kChains = 8;
  int64_t i = 0;
  for (; i + kChains * kLanes <= n; i += kChains * kLanes) {
    Vec acc[kChains];
#pragma GCC unroll 8
    for (int c = 0; c < kChains; ++c) acc[c] = load(y + i + c * kLanes);
    for (int64_t r = 0; r < rows; ++r) {
      const Vec ar = load_scalar(a[r]);
      const float* xr = x + r * stride + i;
#pragma GCC unroll 8
      for (int c = 0; c < kChains; ++c) acc[c] = fma(ar, load(xr + c * kLanes), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < kChains; ++c) store(y + i + c * kLanes, acc[c]);
  }
  for (; i + kLanes <= n; i += kLanes) {
    Vec acc = load(y + i);
    for (int64_t r = 0; r < rows; ++r) acc = fma(load_scalar(a[r]), load(x + r * stride + i), acc);
    store(y + i, acc);
  }
  for (; i < n; ++i) {
    float acc = y[i];
    for (int64_t r = 0; r < rows; ++r) acc += a[r] * x[r * stride + i];
    y[i] = acc;
  }
}

// exp on 16 floats at once (GCC vector extensions, lowered to whatever the compile target
// has: one AVX-512 register, two AVX2 registers, four SSE registers), for softmax.
// Cephes expf: x = n ln2 + r with n = round(x / ln2) (the 1.5 * 2^23 rounding trick) and
// ln2 split in two, a degree-5 polynomial in r, then 2^n added to the exponent bits.
// Measured against double std::exp (tests/unit/kernels/ops_test.cpp, ExpMatchesStdExp):
// max relative error 8.2e-8 (1.4 half-ulps) on [-87.3, 88.3]. Below -87.33 (where exp is
// under FLT_MIN) it returns 0, above 88.38 +inf (exp is finite up to 88.72); NaN stays NaN.
using V16 = float __attribute__((vector_size(64)));
using I16 = int32_t __attribute__((vector_size(64)));
inline V16 exp16(V16 x) {
  const V16 lo = V16{} - 87.3365447505531f, hi = V16{} + 88.3762626647949f;
  const auto under = x < lo, over = x > hi;
  V16 r = x < lo ? lo : x;
  r = r > hi ? hi : r;
  V16 n = r * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest integer
  r = r - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V16 y = V16{} + 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const I16 bits = (__builtin_convertvector(n, I16) + 127) << 23;
  V16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  y = y * scale;
  y = under ? V16{} : y;
  y = over ? V16{} + __builtin_inff() : y;
  return y;
}

// p[j] *= scale for j < n; returns the largest p[j] after scaling (softmax's shift). The
// products are those of a plain loop and max is exact, so the lane order cannot change it.
inline float scale_and_max(int64_t n, float scale, float* p) {
  V16 m = V16{} - __builtin_inff();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    V16 x;
    std::memcpy(&x, p + j, sizeof x);
    x *= scale;
    std::memcpy(p + j, &x, sizeof x);
    m = x > m ? x : m;
  }
  float mx = -__builtin_inff();
  for (int i = 0; i < 16; ++i) mx = std::max(mx, m[i]);
  for (; j < n; ++j) mx = std::max(mx, p[j] *= scale);
  return mx;
}

// y[i] = exp(x[i] - shift) for i < n (x == y allowed); returns sum_i y[i], summed in 16 lanes
// then across them in a fixed order, the tail through a zero-padded block, so every element
// and the sum depend on n and the values alone.
inline float exp_shift_sum(int64_t n, const float* x, float shift, float* y) {
  V16 acc{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V16 v;
    std::memcpy(&v, x + i, sizeof v);
    v = exp16(v - shift);
    std::memcpy(y + i, &v, sizeof v);
    acc += v;
  }
  if (i < n) {
    float tail[16];
    for (int j = 0; j < 16; ++j) tail[j] = i + j < n ? x[i + j] - shift : -__builtin_inff();
    V16 v;
    std::memcpy(&v, tail, sizeof v);
    v = exp16(v);
    std::memcpy(tail, &v, sizeof v);
    for (int64_t j = 0; i + j < n; ++j) y[i + j] = tail[j];
    acc += v;  // the padding lanes are exp(-inf) = 0
  }
  float s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

// sum_i a[i]^2 in f32, same order rules as dot().
inline float sum_squares(const float* a, int64_t n) { return dot(a, a, n); }

}  // namespace dayzero::kernels::cpu::simd
