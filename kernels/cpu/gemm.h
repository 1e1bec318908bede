// Internal to kernels/cpu, the bench and the kernel tests: the GEMM paths matmul_nt() can
// take (OpenBLAS, BLIS, the built-in kernel), how the OpenBLAS core is checked and forced,
// and the rule that picks one path per process. Not for model code: that calls ops.h.
// The BLAS libraries are dlopen()ed (RTLD_LOCAL), never linked, so both can sit in one
// process without their BLAS/CBLAS symbols clashing, and a node without one still runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"

namespace dayzero::kernels::cpu::gemm {

// What this CPU and OS can run (cpuid + xgetbv: the OS must save the wider registers).
enum class IsaClass : int { kSse = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };
struct CpuIsa {
  IsaClass best = IsaClass::kSse;
  bool amd = false;    // vendor, for the AVX2 core name (Zen rather than Haswell)
  bool intel = false;  // vendor, for where the small-M kernel prefetches to (SmallMPrefetchLevel)
  std::string describe() const;  // "avx2 (AuthenticAMD)"
};
CpuIsa detect_isa();
const char* isa_name(IsaClass c);

// The ISA class an OpenBLAS core name implies ("Prescott" -> kSse, "SkylakeX" -> kAvx512),
// case-insensitive; false for a name this table does not know (a newer OpenBLAS).
bool openblas_core_class(std::string_view core, IsaClass* out);
// The OpenBLAS core that runs the widest kernels `isa` allows.
std::string openblas_core_for(const CpuIsa& isa);

// What to do with the core OpenBLAS picked for itself. Force only when the user did not
// choose (OPENBLAS_CORETYPE unset) and the detected core is a known, narrower class than
// the CPU supports: that is the library's "unknown model -> Prescott" fallback.
struct CoreDecision {
  std::string core;     // the core to run ("" = leave the library's choice)
  bool force = false;   // core differs from the detected one and must be forced
  std::string reason;   // for GemmInfo::path, e.g. "library detected Prescott; forced"
};
CoreDecision decide_openblas_core(const CpuIsa& isa, std::string_view detected_core,
                                  const char* user_coretype);

// One GEMM implementation. matmul_nt: y[m, n] = x[m, k] · w[n, k]^T + beta * y, beta 0 or 1;
// m == 1 takes the library's matrix-vector routine. Not safe to call concurrently.
class GemmPath {
 public:
  virtual ~GemmPath() = default;
  virtual std::string name() const = 0;  // "openblas 0.3.21 Zen", "blis 0.9.0 zen3", "builtin avx2"
  virtual void set_threads(int n) = 0;
  virtual void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                         float beta) = 0;
};

// The process's OpenBLAS, loaded on first call; nullptr (with *why) when it cannot be
// loaded. The object lives for the process. Its core is process-wide state: force_core()
// switches every caller, so only the selection below and the bench call it.
class OpenBlas : public GemmPath {
 public:
  static OpenBlas* get(std::string* why);
  virtual std::string version() const = 0;        // "0.3.21"
  virtual std::string core() const = 0;           // the core running now
  virtual std::string detected_core() const = 0;  // the core when this process first looked
  // Re-runs the library's own core setup with OPENBLAS_CORETYPE=core (what it does at load
  // time, through its exported gotoblas_dynamic_quit/init); false with *why when the library
  // lacks that mechanism or ends up on another core.
  virtual bool force_core(const std::string& core, std::string* why) = 0;
};

// libblis (0.9 typed API bli_sgemm/bli_sgemv), nullptr with *why when absent.
GemmPath* blis(std::string* why);

// libdnnl (oneDNN 2.x dnnl_sgemm, dlopen()ed with OMP_WAIT_POLICY=passive unless set),
// nullptr with *why when absent.
GemmPath* onednn(std::string* why);

// The built-in kernel (register-tiled dot products on simd::Vec, split over n across
// kernel_threads()). Always available; each y element is summed in the same order whatever
// the thread count. It is compiled once per instruction set ("generic": 4-lane portable code
// without FMA, "avx2": AVX2 + FMA, "avx512": AVX-512 F/BW/DQ/VL), whose tiles and vector widths
// differ and so sum in other orders; builtin() and the matmul_nt_small_* entry points below run
// the process's choice (builtin_isa()).
GemmPath* builtin();

// One instruction set's copy of the built-in kernel (gemm_builtin.cpp compiled for it).
struct BuiltinKernels {
  const char* isa;  // "generic", "avx2", "avx512"
  GemmPath* path;
  void (*matmul_nt_small_bf16)(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y,
                               float beta);
  void (*matmul_nt_small_stored)(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                                 float beta);
  void (*dequantise_stored_rows)(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out);
  void (*matmul_nt_small_shared_x)(int64_t m, int64_t k, const float* x, const NtProduct* products, int count,
                                   float beta);
};
namespace generic { const BuiltinKernels& kernels(); }
namespace avx2 { const BuiltinKernels& kernels(); }
namespace avx512 { const BuiltinKernels& kernels(); }

// The instruction sets of the built-in kernel, narrowest first, and whether this CPU and OS
// run each.
struct BuiltinIsa {
  const char* name;
  IsaClass needs;
  const BuiltinKernels& (*kernels)();
};
std::vector<BuiltinIsa> builtin_isas();
bool cpu_runs(const BuiltinIsa& isa);
// The copy this process runs, chosen on first use: DAYZERO_CPU_ISA (generic | avx2 | avx512)
// when set, else the widest this CPU runs.
const BuiltinKernels& builtin_isa();

// What the environment asks of the CPU kernels (DAYZERO_CPU_ISA, DAYZERO_GEMM,
// DAYZERO_GEMM_LARGE_M), checked against what this process can run: "" when every request can
// be honoured, else one sentence naming the variable and its value. A backend refuses to start
// on such a request (exit 2) rather than run another path than the one asked for.
std::string kernel_path_request_error();

// The small-M kernel's process-wide settings, shared by every instruction set's copy.
namespace builtin_state {
inline constexpr int kDefaultM1Rows = 2;
inline constexpr int64_t kDefaultPrefetchBytes = 8192;
extern std::atomic<int> g_m1_rows;
extern std::atomic<int64_t> g_m1_prefetch_bytes;
extern std::atomic<bool> g_prefetch_l2;  // SmallMPrefetchLevel::kL2
}  // namespace builtin_state
// The built-in small-M kernel's free parameters at m = 1 (batch-1 decode): the width of its
// tiles (rows of w read side by side, 1..4) and its software prefetch distance along w (bytes;
// 0: none). Neither changes which products an output sums or in which order, so every setting
// gives the same bits; the start-up tuning (tune_small_m) picks among them by timing m = 1.
// 2 <= m <= 16 keeps its own prefetch distance (8 KiB). Process-wide.
struct SmallMSettings {
  int m1_rows = 2;
  int64_t m1_prefetch_bytes = 8192;
};
SmallMSettings small_m_settings();
void set_small_m_settings(const SmallMSettings& s);

// Where the small-M kernel's software prefetch puts w: kL1 (prefetcht0: every level) or kL2
// (prefetcht2: on Intel parts the L2 only). On a 2-vCPU AVX-512 Xeon kL2 read bf16 w at batch 1
// at 0.94-1.02 of a plain read where kL1 read 0.82-0.86 (f32 0.93-1.00 and 0.91-0.98; batch 8
// the same); the AMD machines were measured with kL1 only, and AMD documents the hints
// differently by generation. Default kL2 on Intel, kL1 elsewhere; the start-up tuning leaves it
// alone (its pieces can be cache-resident on a large L3, where the hint's effect on memory
// misses does not show). Changes no bits. Process-wide.
enum class SmallMPrefetchLevel { kL1, kL2 };
SmallMPrefetchLevel small_m_prefetch_level();
void set_small_m_prefetch_level(SmallMPrefetchLevel level);
const char* prefetch_level_name(SmallMPrefetchLevel level);  // "L1", "L2"

// The built-in small-M kernel (1 <= m <= 16) on a bf16 weight w[n, k] as stored: each element
// widened on load, so y has the bits builtin()->matmul_nt gives on w widened to f32.
void matmul_nt_small_bf16(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y, float beta);

// The same on a weight as stored (ops.h StoredWeight: any row of the stored-format table): each
// element converted on load to the value its dequantisation gives, so y has the bits
// builtin()->matmul_nt gives on the dequantised weight.
void matmul_nt_small_stored(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                            float beta);
// Rows [j0, j0 + rows) of the weight w[n, k] as stored dequantised into out[rows, k] (ops.h
// dequantise_stored_rows), with the kernel's own conversion.
void dequantise_stored_rows_builtin(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out);

// The built-in small-M kernel over several weights of one x (ops.h matmul_nt_shared_x): one
// parallel loop over the column tiles of all of them, each weight's tiles those of its own call.
void matmul_nt_small_shared_x(int64_t m, int64_t k, const float* x, const NtProduct* products, int count, float beta);

// y[m, n] = x · w^T + beta * y with double accumulation: the twin every path is checked against.
void matmul_nt_reference(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                         float beta);

// The shapes verify_path() runs (m = 1 and m > 1, beta 0 and 1), so that a test can check
// the selected path on shapes the selection did not see.
struct VerifyShape {
  int64_t m, n, k;
  float beta;
};
std::vector<VerifyShape> verify_shapes();

// Runs `path` on verify_shapes() against the reference. False with the first bad element in
// *detail.
bool verify_path(GemmPath& path, std::string* detail);

// The path matmul_nt() uses, chosen on first call (thread-safe) and logged in gemm_info().
GemmPath& selected_path();

// The large-M paths (m > 16: prefill) this process can run, each after verify_path: the rule's
// own choice first, then the other paths that load ("openblas", "blis", "onednn", "builtin").
// Empty when one path was asked for (DAYZERO_GEMM), which the start-up timing leaves alone.
struct LargeMPath {
  std::string id;   // "openblas", "blis", "onednn", "builtin"
  GemmPath* path = nullptr;
};
std::vector<LargeMPath> large_m_paths(std::vector<std::string>* notes);
// The id of the path m > 16 takes now, and of the one the fixed rule chose.
std::string large_m_path_id();
std::string large_m_rule_id();
// Whether DAYZERO_GEMM_LARGE_M pinned the large-M path (the start-up timing then leaves it).
bool large_m_path_pinned();
// Why the selection could not honour DAYZERO_GEMM or DAYZERO_GEMM_LARGE_M ("" when it did);
// kernel_path_request_error() includes it.
std::string gemm_request_failure();
// Makes `id` (one of large_m_paths()) the path m > 16 takes; the built-in kernel keeps m <= 16.
// `how` is logged in gemm_info().path ("timed at start-up"). False with *why when the id is not
// among large_m_paths(). Changes the bits of every m > 16 product: the run takes one choice
// on every rank (rank 0's), and the cache keeps it from one run to the next.
bool set_large_m_path(const std::string& id, const std::string& how, std::string* why);

}  // namespace dayzero::kernels::cpu::gemm
