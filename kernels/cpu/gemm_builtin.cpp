// The built-in GEMM path: y = x · w^T as register-tiled dot products (x and w are both
// contiguous along k), split over n across dayzero's thread pool. At m <= 16 (decode) it is the
// selected path: x stays in cache and w streams once, prefetched (docs/gemm.md, "Small M"), on
// f32 weights, on bf16 weights as stored and on quantized weights as stored: block-scaled FP8,
// pack-quantized INT4, MXFP4 and NVFP4 (matmul_nt_bf16, matmul_nt_stored).
// Above, it is blocked over k and rows of x and is the fallback when no BLAS library loads
// and the second opinion in the tests; there it does not compete with packed BLAS kernels.
//
// This file is compiled once per instruction set (kernels/CMakeLists.txt: generic, avx2,
// avx512), each copy in its own namespace (DAYZERO_GEMM_ISA) and exported as one
// BuiltinKernels table; gemm_builtin_isa.cpp picks the table this process runs
// (DAYZERO_CPU_ISA, else the widest the CPU runs), so every tile shape can be run and tested on
// any machine that has its instructions.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#if !defined(DAYZERO_GEMM_ISA)
#error "compiled once per instruction set with DAYZERO_GEMM_ISA set (kernels/CMakeLists.txt)"
#endif

namespace dayzero::kernels::cpu::gemm::DAYZERO_GEMM_ISA {
namespace {

using simd::Vec;

// Register tile kMr x kNr accumulators plus kMr x-vectors and one w-vector fit the 16
// (AVX2) or 32 (AVX-512) vector registers (m > kSmallMaxM). m = 1 has no x reuse and is bound
// by reading w, so it takes a 1 x kNrGemv tile: few rows at once, so w is read nearly in one
// sequential stream (with huge pages, 2 rows read 66.6 tok/s where 12 read 59.4 on the decode
// bench on an AVX-512 Xeon; on an AVX2 EPYC 2 rows read w at 18.4 GB/s where 8 read 16.8:
// docs/performance.md).
#if defined(__AVX512F__)
constexpr int kMr = 4, kNr = 6, kNrGemv = 2;
#else
constexpr int kMr = 3, kNr = 4, kNrGemv = 2;
#endif
// A k block: kNr rows of w (kNr * kKc floats) stay in L1 while a column of x tiles passes.
constexpr int64_t kKc = 512;
// Rows of x per block: kMc * kKc floats (128 KiB) stay in L2 while all of w's rows pass.
constexpr int64_t kMc = 64;
static_assert(kKc % simd::kLanes == 0, "only the last k block may have a scalar tail");
// A row of y therefore sums in the same order at m <= kSmallMaxM and above only when k <= kKc;
// like the BLAS libraries (sgemv vs sgemm), the two are not bit-identical in general.

// The weight operand of the tiles. A matrix view W (rows k elements apart) and the view of one
// of its rows: w_rows(w, j, k) is w from its row j on, w_row(w, j, k) row j itself; w_load(r, p)
// the kLanes elements of row r from column p as f32, w_at(r, p) one of them, w_addr(r, p) where
// its bytes are (for the prefetch); kWeightBits<W> bits an element. f32 and bf16 weights are
// plain pointers (bf16 widened, exactly, on load); an FP8 weight as stored (Fp8Tiles) and an
// INT4 one (Int4Tiles) convert each element to the value its dequantisation gives. Every view
// gives the tiles the same f32 values in the same order, so a weight as stored has the bits of
// its f32 form.
inline const float* w_rows(const float* w, int64_t j, int64_t k) { return w + j * k; }
inline const uint16_t* w_rows(const uint16_t* w, int64_t j, int64_t k) { return w + j * k; }
inline const float* w_row(const float* w, int64_t j, int64_t k) { return w + j * k; }
inline const uint16_t* w_row(const uint16_t* w, int64_t j, int64_t k) { return w + j * k; }
inline float w_at(const float* w, int64_t i) { return w[i]; }
inline float w_at(const uint16_t* w, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline Vec w_load(const float* w, int64_t p) { return simd::load(w + p); }
inline Vec w_load(const uint16_t* w, int64_t p) { return simd::load_bf16(w + p); }
inline const char* w_addr(const float* w, int64_t p) { return reinterpret_cast<const char*>(w + p); }
inline const char* w_addr(const uint16_t* w, int64_t p) { return reinterpret_cast<const char*>(w + p); }

// The weights as stored (ops.h StoredWeight) have one view per kind of layout: an FP8 weight
// (Fp8Tiles, one byte an element in 2-D blocks) and a grouped 4-bit one (GroupTiles: INT4 and
// FP4, their codecs the decoding), each built per call from its StoredWeight by prepare_stored().
//
// An FP8 weight's scales as one call uses them (Fp8Prepared): each covering block's scale
// times 2^8 for E4M3 (exact: load_fp8 gives the value times 2^-8, so one multiply still rounds
// f32(byte) * scale once), and the block column of each vector step of a row, -1 where the step
// straddles two blocks (a slice that starts inside a block at a column not a multiple of kLanes,
// or blocks narrower than a vector).
struct Fp8Prepared {
  const StoredWeight* w = nullptr;
  const float* scale = nullptr;  // [scale rows, w->scale_cols], prescaled
  const int32_t* step_block = nullptr;  // [k / kLanes]
  int shift = 7;  // load_fp8's: 7 E4M3, 8 E5M2
};
// Rows of an FP8 weight from row `row` (of the slice) on.
struct Fp8Tiles {
  const Fp8Prepared* f;
  int64_t row;
};
// The fields the loads use are copied in, so the inner loop reads them from registers.
struct Fp8Row {
  const uint8_t* q;            // the row's bytes
  const float* srow;           // the prescaled scales of its row of blocks
  const int32_t* step_block;   // Fp8Prepared's
  int shift;                   // Fp8Prepared's
  const Fp8Prepared* f;
};
// A 4-bit weight in groups along its rows (int4-pack, mxfp4, nvfp4: GroupTiles) has one per-call
// table and one view; its codec says how a nibble and its group's scale become f32 (Int4Codec,
// Fp4Codec). The table (GroupPrepared): the group column of each vector step of a row, -1 where
// the step straddles two groups (a slice that starts inside a group at a column not a multiple of
// kLanes, or groups narrower than a vector). The published layouts (groups of 32 or 16, slices of
// whole groups) take a shift instead of the table: group_shift = log2(group size) when the slice
// starts on a group and groups are a power of two of whole vectors, else -1.
struct GroupPrepared {
  const StoredWeight* w = nullptr;
  const int32_t* step_group = nullptr;  // [k / kLanes]
  int group_shift = -1;
  // FP4: the f32 scale of each of the 256 scale bytes (core/stored_format.h fp4_group_scale:
  // 2^(e - 127) for MXFP4, f32(E4M3) / global for NVFP4). Unused by INT4.
  const float* scale_of = nullptr;
};
// INT4: nibbles holding q + 8, bf16 group scales (widened: exact).
struct Int4Codec {
  using Scale = uint16_t;
  static Vec load(const uint8_t* q) { return simd::load_int4(q); }
  static float at(const uint8_t* q, int64_t p) { return static_cast<float>(simd::int4_at(q, p)); }
  static float scale(const GroupPrepared& f, uint16_t s) {
    (void)f;
    const uint32_t bits = static_cast<uint32_t>(s) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};
// FP4: E2M1 codes, one scale byte a group looked up in the call's table.
struct Fp4Codec {
  using Scale = uint8_t;
  static Vec load(const uint8_t* q) { return simd::load_e2m1(q); }
  static float at(const uint8_t* q, int64_t p) { return simd::e2m1_at(q, p); }
  static float scale(const GroupPrepared& f, uint8_t s) { return f.scale_of[s]; }
};
// The 256 scales of an FP4 scale kind and global scale, made when they change: made on every
// call (256 conversions), they cost a batch-1 decode of MXFP4 experts a quarter of its speed
// (decode_bench --model moe: 121 against 158 tok/s; docs/performance.md).
struct Fp4ScaleTable {
  ScaleKind kind = ScaleKind::kF32;  // none yet
  float global = 0.0f;
  float scale_of[256];
  const float* get(ScaleKind k, float g) {
    if (k != kind || g != global) {
      for (int b = 0; b < 256; ++b) scale_of[b] = fp4_group_scale(k, static_cast<uint8_t>(b), g);
      kind = k;
      global = g;
    }
    return scale_of;
  }
};
// Rows of a grouped 4-bit weight from row `row` (of the slice) on.
template <typename C>
struct GroupTiles {
  const GroupPrepared* f;
  int64_t row;
};
template <typename C>
struct GroupRow {
  const uint8_t* q;                  // the row's nibbles
  const typename C::Scale* srow;     // the scales of its groups
  const int32_t* step_group;         // GroupPrepared's
  int group_shift;                   // GroupPrepared's
  const GroupPrepared* f;
};
using Int4Tiles = GroupTiles<Int4Codec>;
using Fp4Tiles = GroupTiles<Fp4Codec>;
// Bits an element: of the pointee for the f32 and bf16 views (plain pointers).
template <typename W>
inline constexpr int kWeightBits = 8 * static_cast<int>(sizeof(std::remove_pointer_t<W>));
template <>
inline constexpr int kWeightBits<Fp8Tiles> = 8;
template <typename C>
inline constexpr int kWeightBits<GroupTiles<C>> = 4;
static_assert(kWeightBits<const float*> == 32 && kWeightBits<const uint16_t*> == 16,
              "an element's bits, not its pointer's: one prefetch per 64-byte line of w, not per step");

inline Fp8Tiles w_rows(const Fp8Tiles& w, int64_t j, int64_t k) {
  (void)k;
  return {w.f, w.row + j};
}
inline Fp8Row w_row(const Fp8Tiles& w, int64_t j, int64_t k) {
  (void)k;
  const StoredWeight& q = *w.f->w;
  const int64_t r = w.row + j;
  const int64_t block_row = (q.row0 + r) / q.block_rows - q.row0 / q.block_rows;
  return {q.q + r * q.row_bytes, w.f->scale + block_row * q.scale_cols, w.f->step_block, w.f->shift, w.f};
}
// The scale of column p of a row (its block relative to the first covering block).
inline float fp8_scale_at(const Fp8Row& r, int64_t p) {
  const StoredWeight& q = *r.f->w;
  return r.srow[(q.col0 + p) / q.block_cols - q.col0 / q.block_cols];
}
inline float w_at(const Fp8Row& r, int64_t p) { return simd::fp8_bits_to_f32(r.q[p], r.shift) * fp8_scale_at(r, p); }
inline Vec w_load(const Fp8Row& r, int64_t p) {
  const int32_t b = r.step_block[p / simd::kLanes];
  Vec s;
  if (b >= 0) [[likely]] {
    s = simd::load_scalar(r.srow[b]);
  } else {
    float lanes[simd::kLanes];
    for (int l = 0; l < simd::kLanes; ++l) lanes[l] = fp8_scale_at(r, p + l);
    s = simd::load(lanes);
  }
  return simd::mul(simd::load_fp8(r.q + p, r.shift), s);
}
inline const char* w_addr(const Fp8Row& r, int64_t p) { return reinterpret_cast<const char*>(r.q + p); }

template <typename C>
inline GroupTiles<C> w_rows(const GroupTiles<C>& w, int64_t j, int64_t k) {
  (void)k;
  return {w.f, w.row + j};
}
template <typename C>
inline GroupRow<C> w_row(const GroupTiles<C>& w, int64_t j, int64_t k) {
  (void)k;
  const int64_t r = w.row + j;
  const StoredWeight& q = *w.f->w;
  return {q.q + r * q.row_bytes, static_cast<const typename C::Scale*>(q.scale) + r * q.scale_cols, w.f->step_group,
          w.f->group_shift, w.f};
}
// The scale of column p of a row (its group relative to the first covering group).
template <typename C>
inline float group_scale_at(const GroupRow<C>& r, int64_t p) {
  const StoredWeight& q = *r.f->w;
  return C::scale(*r.f, r.srow[(q.col0 + p) / q.block_cols - q.col0 / q.block_cols]);
}
template <typename C>
inline float w_at(const GroupRow<C>& r, int64_t p) {
  return C::at(r.q, p) * group_scale_at(r, p);
}
template <typename C>
inline Vec w_load(const GroupRow<C>& r, int64_t p) {
  if (r.group_shift >= 0) [[likely]]
    return simd::mul(C::load(r.q + p / 2), simd::load_scalar(C::scale(*r.f, r.srow[p >> r.group_shift])));
  const int32_t g = r.step_group[p / simd::kLanes];
  Vec s;
  if (g >= 0) {
    s = simd::load_scalar(C::scale(*r.f, r.srow[g]));
  } else {
    float lanes[simd::kLanes];
    for (int l = 0; l < simd::kLanes; ++l) lanes[l] = group_scale_at(r, p + l);
    s = simd::load(lanes);
  }
  return simd::mul(C::load(r.q + p / 2), s);
}
template <typename C>
inline const char* w_addr(const GroupRow<C>& r, int64_t p) {
  return reinterpret_cast<const char*>(r.q + p / 2);
}

// The end of every tile: each y element is its lanes summed by hsum, then the scalar tail
// [p, kc) of its dot product, then stored or added to y. One order for every tile shape and
// every weight type, so a weight as stored gives the bits of its f32 form. rows: the NR rows of w.
template <int MR, int NR, typename R>
inline void finish_tile(const Vec (&acc)[MR][NR], int64_t p, int64_t kc, const float* x, const R (&rows)[NR],
                        int64_t ld, float* y, int64_t ldy, bool add) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = simd::hsum(acc[i][j]);
      // One explicit fused multiply-add per element: left to -ffp-contract, this line rounded
      // differently in the f32 instance than in the INT4 and FP8 ones (on AVX-512, where
      // k < 16 is all tail, they then missed their dequantised form's bits).
      for (int64_t q = p; q < kc; ++q) s = std::fma(x[i * ld + q], w_at(rows[j], q), s);
      float& out = y[i * ldy + j];
      out = add ? out + s : s;
    }
  }
}

// y[MR, NR] (+)= x[MR, kc] · w[NR, kc]^T; x and w rows are `ld` floats apart, y rows `ldy`.
// Each y element is: lanes summed by hsum, then the scalar tail, then added to y. That
// order is the same for every tile shape, so the split into tiles never changes a result.
template <int MR, int NR>
void tile(const float* x, const float* w, int64_t ld, int64_t kc, float* y, int64_t ldy, bool add) {
  // Fully unrolled so the accumulators live in registers; -O2 keeps these loops rolled and
  // the array in memory, at a third of the speed.
  Vec acc[MR][NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[i][j] = simd::zero();
  int64_t p = 0;
  for (; p + simd::kLanes <= kc; p += simd::kLanes) {
    Vec xv[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) xv[i] = simd::load(x + i * ld + p);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      const Vec wv = simd::load(w + j * ld + p);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][j] = simd::fma(xv[i], wv, acc[i][j]);
    }
  }
  const float* rows[NR];
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) rows[j] = w + j * ld;
  finish_tile<MR, NR, const float*>(acc, p, kc, x, rows, ld, y, ldy, add);
}

// Runs the MR' x NR' tile for mr <= MR, nr <= NR (edges of the matrix).
template <int MR, int NR>
void tile_edge(int mr, int nr, const float* x, const float* w, int64_t ld, int64_t kc, float* y, int64_t ldy,
               bool add) {
  if constexpr (MR > 1) {
    if (mr < MR) return tile_edge<MR - 1, NR>(mr, nr, x, w, ld, kc, y, ldy, add);
  }
  if constexpr (NR > 1) {
    if (nr < NR) return tile_edge<MR, NR - 1>(mr, nr, x, w, ld, kc, y, ldy, add);
  }
  tile<MR, NR>(x, w, ld, kc, y, ldy, add);
}

// Small m (decode batches, 1 <= m <= kSmallMaxM): every row of x stays in L1/L2 for the whole
// call, so k is not blocked (each y element is one hsum, and each w row streams end to end, read
// from memory once per call) and a tile covers up to kMrSmall rows of x: y[MR, NR] = x · w^T.
// Loop order w vectors outside, x rows inside: MR * NR accumulators + NR w vectors + 1 x vector.
// m = 1 takes 1 x kNrGemv tiles of the same code (no x reuse to gain; w read as one stream).
#if defined(__AVX512F__)
constexpr int kMrSmall = 8, kNrSmall = 3;
#else
constexpr int kMrSmall = 4, kNrSmall = 2;
#endif
constexpr int64_t kSmallMaxM = 16;
// Software prefetch distance along w at 2 <= m <= 16, 8 KiB: w is contiguous, so this runs
// ahead into the next tiles' rows. Measured at m = 8 on the decode shapes (docs/gemm.md, "Small
// M"): 4-16 KiB ahead with prefetcht0 is 1.3-1.6x no prefetch; 2 KiB, or the non-temporal hint,
// gains little. Prefetching past the end of w is harmless (a prefetch never faults). A bf16
// weight prefetches the same distance in bytes.
constexpr int64_t kSmallPrefetchBytes = 8192;
// m = 1's tile width and prefetch distance and the prefetch level are process-wide, shared by
// every instruction set's copy (gemm_builtin_isa.cpp, SmallMSettings).
using builtin_state::g_m1_prefetch_bytes;
using builtin_state::g_m1_rows;
using builtin_state::g_prefetch_l2;
static_assert(kNrGemv == builtin_state::kDefaultM1Rows && kSmallPrefetchBytes == builtin_state::kDefaultPrefetchBytes);

// One step of a small tile: NR vectors of w at p, each multiplied into MR accumulators.
template <int MR, int NR, typename R>
inline void tile_small_step(const float* x, const R (&rows)[NR], int64_t k, int64_t p, Vec (&acc)[MR][NR]) {
  Vec wv[NR];
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) wv[j] = w_load(rows[j], p);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const Vec xv = simd::load(x + i * k + p);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[i][j] = simd::fma(xv, wv[j], acc[i][j]);
  }
}

template <int MR, int NR, typename W>
[[gnu::always_inline]] inline void tile_small(const float* x, const W& w, int64_t k, float* y, int64_t ldy, bool add,
                                              int64_t prefetch_bytes) {
  // The steps of one 64-byte line of each w row go together behind one prefetch per row (a
  // bf16 row on AVX2 is 4 vectors a line: a prefetch per vector cost a quarter of the loads).
  // Unrolling keeps every accumulator's order, so the bits do not change.
  constexpr int kStepsPerLine = std::max<int>(1, 512 / (simd::kLanes * kWeightBits<W>));
  constexpr int64_t kLine = int64_t{kStepsPerLine} * simd::kLanes;
  using R = decltype(w_row(w, 0, k));
  const bool to_l2 = g_prefetch_l2.load(std::memory_order_relaxed);
  R rows[NR];
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) rows[j] = w_row(w, j, k);
  Vec acc[MR][NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[i][j] = simd::zero();
  int64_t p = 0;
  for (; p + kLine <= k; p += kLine) {
    if (prefetch_bytes) {
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j) {
        if (to_l2) {
          __builtin_prefetch(w_addr(rows[j], p) + prefetch_bytes, 0, 1);
        } else {
          __builtin_prefetch(w_addr(rows[j], p) + prefetch_bytes, 0, 3);
        }
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < kStepsPerLine; ++u) tile_small_step<MR, NR, R>(x, rows, k, p + u * simd::kLanes, acc);
  }
  for (; p + simd::kLanes <= k; p += simd::kLanes) tile_small_step<MR, NR, R>(x, rows, k, p, acc);
  finish_tile<MR, NR, R>(acc, p, k, x, rows, k, y, ldy, add);
}

template <int MR, int NR, typename W>
void tile_small_edge(int mr, int nr, const float* x, const W& w, int64_t k, float* y, int64_t ldy, bool add,
                     int64_t pf) {
  if constexpr (MR > 1) {
    if (mr < MR) return tile_small_edge<MR - 1, NR, W>(mr, nr, x, w, k, y, ldy, add, pf);
  }
  if constexpr (NR > 1) {
    if (nr < NR) return tile_small_edge<MR, NR - 1, W>(mr, nr, x, w, k, y, ldy, add, pf);
  }
  tile_small<MR, NR, W>(x, w, k, y, ldy, add, pf);
}

// m = 1 over columns [j0, j1) in 1 x NR tiles.
template <int NR, typename W>
void gemv_columns(int64_t n, int64_t k, const float* x, const W& w, float* y, bool add, int64_t j0, int64_t j1,
                  int64_t pf) {
  // Whole tiles by the tile itself, inlined: at m = 1 a tile is one row of w (2-6 KiB), and a
  // call per tile cost ~5% of the streaming rate (AVX2 EPYC, decode_bench's GEMM sweep).
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) tile_small<1, NR, W>(x, w_rows(w, j, k), k, y + j, n, add, pf);
  if (j < j1) tile_small_edge<1, NR, W>(1, static_cast<int>(j1 - j), x, w_rows(w, j, k), k, y + j, n, add, pf);
  (void)n;
}

// Row r of an FP8 or INT4 weight as f32 into out[k]: the values the tiles' loads give.
template <typename R>
inline void row_to_f32(const R& r, int64_t k, float* out) {
  int64_t p = 0;
  for (; p + simd::kLanes <= k; p += simd::kLanes) simd::store(out + p, w_load(r, p));
  for (; p < k; ++p) out[p] = w_at(r, p);
}

// Columns [j0, j1) of y for 1 <= m <= kSmallMaxM.
template <typename W>
void gemm_columns_small(int64_t m, int64_t n, int64_t k, const float* x, const W& w, float* y, float beta,
                        int64_t j0, int64_t j1) {
  const bool add = beta != 0.0f;
  if (m == 1) {
    const int64_t pf = g_m1_prefetch_bytes.load(std::memory_order_relaxed);
    switch (g_m1_rows.load(std::memory_order_relaxed)) {
      case 1: return gemv_columns<1, W>(n, k, x, w, y, add, j0, j1, pf);
      case 3: return gemv_columns<3, W>(n, k, x, w, y, add, j0, j1, pf);
      case 4: return gemv_columns<4, W>(n, k, x, w, y, add, j0, j1, pf);
      default: return gemv_columns<2, W>(n, k, x, w, y, add, j0, j1, pf);
    }
  }
  for (int64_t j = j0; j < j1; j += kNrSmall) {
    const int jn = static_cast<int>(std::min<int64_t>(kNrSmall, j1 - j));
    for (int64_t i = 0; i < m; i += kMrSmall) {
      const int in = static_cast<int>(std::min<int64_t>(kMrSmall, m - i));
      tile_small_edge<kMrSmall, kNrSmall, W>(in, jn, x + i * k, w_rows(w, j, k), k, y + i * n + j, n, add,
                                             kSmallPrefetchBytes);
    }
  }
}

// Columns [j0, j1) of y, all rows.
void gemm_columns(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y, float beta,
                  int64_t j0, int64_t j1) {
  if (m <= kSmallMaxM) return gemm_columns_small<const float*>(m, n, k, x, w, y, beta, j0, j1);
  for (int64_t kb = 0; kb < k; kb += kKc) {
    const int64_t kc = std::min(kKc, k - kb);
    const bool add = kb > 0 || beta != 0.0f;
    for (int64_t ib = 0; ib < m; ib += kMc) {
      const int64_t ie = std::min(m, ib + kMc);
      for (int64_t j = j0; j < j1; j += kNr) {
        const int jn = static_cast<int>(std::min<int64_t>(kNr, j1 - j));
        for (int64_t i = ib; i < ie; i += kMr) {
          const int in = static_cast<int>(std::min<int64_t>(kMr, ie - i));
          tile_edge<kMr, kNr>(in, jn, x + i * k + kb, w + j * k + kb, k, kc, y + i * n + j, n, add);
        }
      }
    }
  }
}

// Runs tiles(t0, t1) over [0, n_tiles) in chunks across kernel_threads(); `work` is the
// multiply-adds of all the tiles.
template <typename Tiles>
void for_tile_chunks(int64_t work, int64_t n_tiles, const Tiles& tiles) {
  // Below ~64 K multiply-adds per thread (about 10 us), handing work to the pool costs more
  // than it saves; at m = 1 that is 256 KiB of weights, whose reading two threads share.
  const int64_t threads = std::clamp<int64_t>(work >> 16, 1, kernel_threads());
  if (threads == 1) return tiles(int64_t{0}, n_tiles);
  // Each thread streams its own contiguous share of the tiles and then helps with the back of
  // the others' (parallel_for_shares): interleaved chunks from one counter cost small GEMMs a
  // fifth to a third of their streaming rate on a 2-vCPU Xeon, each chunk a new place in w
  // (docs/performance.md). Stealing keeps a thread the OS descheduled from holding up the rest.
  parallel_for_shares(n_tiles, std::max<int64_t>(1, n_tiles / (threads * 16)), tiles);
}

// Runs columns(j0, j1) over [0, n) in chunks of whole nr-wide tiles across kernel_threads().
template <typename Columns>
void for_column_chunks(int64_t m, int64_t n, int64_t k, int64_t nr, const Columns& columns) {
  for_tile_chunks(m * n * k, (n + nr - 1) / nr,
                  [&](int64_t t0, int64_t t1) { columns(t0 * nr, std::min(n, t1 * nr)); });
}

class Builtin final : public GemmPath {
 public:
  std::string name() const override {
    return std::string("builtin ") + simd::kIsaName + " " + std::to_string(kMr) + "x" + std::to_string(kNr) +
           " tiles (" + std::to_string(kMrSmall) + "x" + std::to_string(kNrSmall) + " at m <= " +
           std::to_string(kSmallMaxM) + ", prefetch to " + prefetch_level_name(small_m_prefetch_level()) + ")";
  }
  void set_threads(int n) override { set_kernel_threads(n); }
  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    for_column_chunks(m, n, k, m == 1 ? g_m1_rows.load() : (m <= kSmallMaxM ? kNrSmall : kNr), [&](int64_t j0, int64_t j1) {
      gemm_columns(m, n, k, x, w, y, beta, j0, j1);
    });
  }
};

}  // namespace

GemmPath* builtin_path() {
  static Builtin path;
  return &path;
}

void matmul_nt_small_bf16(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y, float beta) {
  DZ_CHECK(m >= 1 && m <= kSmallMaxM, "matmul_nt_small_bf16: m " << m << " outside 1.." << kSmallMaxM);
  for_column_chunks(m, n, k, m == 1 ? g_m1_rows.load() : kNrSmall, [&](int64_t j0, int64_t j1) {
    gemm_columns_small<const uint16_t*>(m, n, k, x, w, y, beta, j0, j1);
  });
}

namespace {

// For each vector step of a row of k columns that starts at column col0 of its weight: the
// column block (of block_cols columns, counted from the one holding col0) all its lanes are in,
// or -1 where the step straddles two blocks.
void column_block_steps(int64_t col0, int64_t block_cols, int64_t k, std::vector<int32_t>& steps) {
  const int64_t nv = k / simd::kLanes, first = col0 / block_cols;
  steps.resize(static_cast<size_t>(std::max<int64_t>(nv, 1)));
  int64_t block = first, end = (block + 1) * block_cols;
  for (int64_t v = 0; v < nv; ++v) {
    const int64_t c = col0 + v * simd::kLanes;
    while (c >= end) ++block, end += block_cols;
    steps[static_cast<size_t>(v)] = c + simd::kLanes <= end ? static_cast<int32_t>(block - first) : -1;
  }
}

// One call's view of a weight as stored: the prepared form of its scheme (the others unused) and
// the buffers it points into, which outlive the call (thread_local, or one per product).
struct StoredPrepared {
  std::vector<float> scale;     // FP8's prescaled block scales
  std::vector<int32_t> steps;   // the block or group of each vector step
  Fp8Prepared fp8;
  GroupPrepared group;  // INT4 and FP4
  Fp4ScaleTable fp4_scales;
};

// The block-column table of w's vector steps, and log2 of its block width where every step of a
// row finds its block by a shift (power-of-two blocks of whole vectors, the slice starting on
// one: the published INT4 and FP4 layouts), else -1.
int column_steps(const StoredWeight& w, int64_t k, std::vector<int32_t>& steps) {
  column_block_steps(w.col0, w.block_cols, k, steps);
  const bool by_shift = std::has_single_bit(static_cast<uint64_t>(w.block_cols)) &&
                        w.block_cols % simd::kLanes == 0 && w.col0 % w.block_cols == 0;
  return by_shift ? std::countr_zero(static_cast<uint64_t>(w.block_cols)) : -1;
}

// Prepares w[n, k] for one call: checks its place against its scales (the scale columns its
// blocks need), then fills the scheme's view.
void prepare_stored(const StoredWeight& w, int64_t n, int64_t k, StoredPrepared& out) {
  const StoredFormat& f = stored_format(w.scheme);
  const int64_t min_row_bytes = f.value_bits == 8 ? k : (k + 1) / 2;
  DZ_CHECK(w.block_rows > 0 && w.block_cols > 0 && w.row0 >= 0 && w.col0 >= 0 && n >= 1 && k >= 1 &&
               w.row_bytes >= min_row_bytes,
           f.name << " weight " << n << " x " << k << " at (" << w.row0 << ", " << w.col0 << ") in blocks of "
                  << w.block_rows << " x " << w.block_cols << ", " << w.row_bytes << " bytes a row");
  const int64_t scale_cols = (w.col0 + k - 1) / w.block_cols + 1 - w.col0 / w.block_cols;
  DZ_CHECK(w.scale_cols == scale_cols,
           f.name << " weight " << n << " x " << k << ": " << w.scale_cols << " scale columns, its blocks need "
                  << scale_cols);
  const int shift = column_steps(w, k, out.steps);
  switch (w.scheme) {
    case StoredScheme::kFp8Block: {
      // Each covering block's scale times 2^8 for E4M3 (Fp8Prepared).
      const int64_t scale_rows = (w.row0 + n - 1) / w.block_rows + 1 - w.row0 / w.block_rows;
      const float* src = static_cast<const float*>(w.scale);
      out.scale.resize(static_cast<size_t>(scale_rows * scale_cols));
      for (size_t i = 0; i < out.scale.size(); ++i) {
        out.scale[i] = w.e5m2 ? src[i] : src[i] * 256.0f;
        DZ_CHECK(std::isfinite(out.scale[i]) || !std::isfinite(src[i]),
                 "fp8 weight: block scale " << src[i] << " is too large (above 2^119)");
      }
      out.fp8 = {&w, out.scale.data(), out.steps.data(), w.e5m2 ? 8 : 7};
      return;
    }
    case StoredScheme::kInt4Group:
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4:
      out.group.w = &w;
      out.group.step_group = out.steps.data();
      out.group.group_shift = shift;
      if (f.scale == ScaleKind::kUE8M0 || f.scale == ScaleKind::kE4M3)
        out.group.scale_of = out.fp4_scales.get(f.scale, w.global_scale);
      return;
  }
  DZ_CHECK(false, "stored weight of scheme " << static_cast<int>(w.scheme));
}

// Calls f with the tile view of the prepared weight's scheme (its rows from row 0 on).
template <typename F>
void with_stored_tiles(StoredScheme scheme, const StoredPrepared& p, const F& f) {
  switch (scheme) {
    case StoredScheme::kFp8Block: return f(Fp8Tiles{&p.fp8, 0});
    case StoredScheme::kInt4Group: return f(Int4Tiles{&p.group, 0});
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4: return f(Fp4Tiles{&p.group, 0});
  }
}

}  // namespace

void dequantise_stored_rows_builtin(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out) {
  if (rows <= 0 || k <= 0) return;
  thread_local StoredPrepared p;
  prepare_stored(w, j0 + rows, k, p);
  with_stored_tiles(w.scheme, p, [&](const auto& t) {
    for (int64_t j = j0; j < j0 + rows; ++j) row_to_f32(w_row(t, j, k), k, out + (j - j0) * k);
  });
}

void matmul_nt_small_stored(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                            float beta) {
  DZ_CHECK(m >= 1 && m <= kSmallMaxM, "matmul_nt_small_stored: m " << m << " outside 1.." << kSmallMaxM);
  thread_local StoredPrepared p;
  prepare_stored(w, n, k, p);
  with_stored_tiles(w.scheme, p, [&](const auto& t) {
    using W = std::decay_t<decltype(t)>;
    for_column_chunks(m, n, k, m == 1 ? g_m1_rows.load() : kNrSmall, [&](int64_t j0, int64_t j1) {
      gemm_columns_small<W>(m, n, k, x, t, y, beta, j0, j1);
    });
  });
}
void matmul_nt_small_shared_x(int64_t m, int64_t k, const float* x, const NtProduct* products, int count, float beta) {
  DZ_CHECK(m >= 1 && m <= kSmallMaxM && count >= 0 && count <= kMaxSharedXProducts,
           "matmul_nt_small_shared_x: m " << m << ", " << count << " products");
  // The products' tiles laid end to end: product i owns tiles [first[i], first[i + 1]). A chunk
  // that spans two products runs each one's own columns, so every tile is the one its product's
  // own call would run (the same bits).
  const int64_t nr = m == 1 ? g_m1_rows.load() : kNrSmall;
  int64_t first[kMaxSharedXProducts + 1] = {0};
  int64_t work = 0;
  // The products kept as stored, prepared once for all the threads: the pool's threads read the
  // calling thread's, through this pointer (by name they would reach their own thread_local).
  thread_local StoredPrepared prepared_here[kMaxSharedXProducts];
  StoredPrepared* const prepared = prepared_here;
  for (int i = 0; i < count; ++i) {
    first[i + 1] = first[i] + (products[i].n + nr - 1) / nr;
    work += m * products[i].n * k;
    if (products[i].kind == WeightKind::kStored && products[i].n > 0)
      prepare_stored(*static_cast<const StoredWeight*>(products[i].w), products[i].n, k, prepared[i]);
  }
  for_tile_chunks(work, first[count], [&](int64_t t0, int64_t t1) {
    for (int i = 0; i < count; ++i) {
      const int64_t a = std::max(t0, first[i]), b = std::min(t1, first[i + 1]);
      if (a >= b) continue;
      const NtProduct& pr = products[i];
      const int64_t j0 = (a - first[i]) * nr, j1 = std::min(pr.n, (b - first[i]) * nr);
      switch (pr.kind) {
        case WeightKind::kBF16:
          gemm_columns_small<const uint16_t*>(m, pr.n, k, x, static_cast<const uint16_t*>(pr.w), pr.y, beta, j0, j1);
          break;
        case WeightKind::kStored:
          with_stored_tiles(static_cast<const StoredWeight*>(pr.w)->scheme, prepared[i], [&](const auto& t) {
            gemm_columns_small<std::decay_t<decltype(t)>>(m, pr.n, k, x, t, pr.y, beta, j0, j1);
          });
          break;
        case WeightKind::kF32:
          gemm_columns_small<const float*>(m, pr.n, k, x, static_cast<const float*>(pr.w), pr.y, beta, j0, j1);
          break;
      }
    }
  });
}

const BuiltinKernels& kernels() {
  static const BuiltinKernels table{simd::kIsaName, builtin_path(), matmul_nt_small_bf16, matmul_nt_small_stored,
                                    dequantise_stored_rows_builtin, matmul_nt_small_shared_x};
  return table;
}

}  // namespace dayzero::kernels::cpu::gemm::DAYZERO_GEMM_ISA
