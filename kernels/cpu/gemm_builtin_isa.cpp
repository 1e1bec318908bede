// Which instruction set's copy of the built-in GEMM kernel this process runs (gemm.h
// builtin_isa), the entry points that forward to it, the small-M settings every copy shares, and
// the check of what the environment asks of the CPU kernels (kernel_path_request_error).
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/check.h"
#include "kernels/cpu/gemm.h"

namespace dayzero::kernels::cpu::gemm {

namespace builtin_state {
std::atomic<int> g_m1_rows{kDefaultM1Rows};
std::atomic<int64_t> g_m1_prefetch_bytes{kDefaultPrefetchBytes};
// Intel parts prefetch into L2, the others into L1 (gemm.h SmallMPrefetchLevel).
std::atomic<bool> g_prefetch_l2{detect_isa().intel};
}  // namespace builtin_state

std::vector<BuiltinIsa> builtin_isas() {
  return {{"generic", IsaClass::kSse, &generic::kernels},
          {"avx2", IsaClass::kAvx2, &avx2::kernels},
          {"avx512", IsaClass::kAvx512, &avx512::kernels}};
}

bool cpu_runs(const BuiltinIsa& isa) { return detect_isa().best >= isa.needs; }

namespace {

constexpr const char* kIsaVar = "DAYZERO_CPU_ISA";
constexpr const char* kGemmVar = "DAYZERO_GEMM";
constexpr const char* kLargeMVar = "DAYZERO_GEMM_LARGE_M";

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The copy DAYZERO_CPU_ISA names (nullptr with *why when it names none or one this CPU cannot
// run), or the widest this CPU runs when it is unset.
const BuiltinKernels* choose_isa(std::string* why) {
  const std::vector<BuiltinIsa> isas = builtin_isas();
  const char* want = env(kIsaVar);
  const BuiltinIsa* chosen = nullptr;
  for (const BuiltinIsa& isa : isas) {
    if (want ? std::strcmp(want, isa.name) == 0 : cpu_runs(isa)) chosen = &isa;
  }
  if (!chosen) {
    *why = std::string(kIsaVar) + "=" + want + " is not one of generic, avx2, avx512";
    return nullptr;
  }
  if (!cpu_runs(*chosen)) {
    *why = std::string(kIsaVar) + "=" + want + ": this CPU (" + detect_isa().describe() + ") cannot run " +
           chosen->name + " instructions";
    return nullptr;
  }
  return &chosen->kernels();
}

}  // namespace

const BuiltinKernels& builtin_isa() {
  static const BuiltinKernels* chosen = [] {
    std::string why;
    const BuiltinKernels* k = choose_isa(&why);
    DZ_CHECK(k != nullptr, why);
    return k;
  }();
  return *chosen;
}

std::string kernel_path_request_error() {
  std::string why;
  if (!choose_isa(&why)) return why;
  static constexpr const char* kIds[] = {"openblas", "blis", "builtin", "onednn"};
  for (const char* var : {kGemmVar, kLargeMVar}) {
    const char* want = env(var);
    if (!want) continue;
    bool known = false;
    for (const char* id : kIds) known = known || std::strcmp(want, id) == 0;
    if (!known) return std::string(var) + "=" + want + " is not one of openblas, blis, onednn, builtin";
  }
  if (env(kGemmVar) && env(kLargeMVar))
    return std::string(kGemmVar) + " runs one path at every m; " + kLargeMVar + " cannot also be set";
  // Whether the named library loads and computes right is known once the selection ran.
  return gemm_request_failure();
}

GemmPath* builtin() { return builtin_isa().path; }

void matmul_nt_small_bf16(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y, float beta) {
  builtin_isa().matmul_nt_small_bf16(m, n, k, x, w, y, beta);
}
void matmul_nt_small_stored(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                            float beta) {
  builtin_isa().matmul_nt_small_stored(m, n, k, x, w, y, beta);
}
void dequantise_stored_rows_builtin(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out) {
  builtin_isa().dequantise_stored_rows(w, k, j0, rows, out);
}
void matmul_nt_small_shared_x(int64_t m, int64_t k, const float* x, const NtProduct* products, int count, float beta) {
  builtin_isa().matmul_nt_small_shared_x(m, k, x, products, count, beta);
}

SmallMSettings small_m_settings() { return {builtin_state::g_m1_rows.load(), builtin_state::g_m1_prefetch_bytes.load()}; }

void set_small_m_settings(const SmallMSettings& s) {
  DZ_CHECK(s.m1_rows >= 1 && s.m1_rows <= 4 && s.m1_prefetch_bytes >= 0,
           "small-M settings: m = 1 rows " << s.m1_rows << ", prefetch " << s.m1_prefetch_bytes);
  builtin_state::g_m1_rows.store(s.m1_rows);
  builtin_state::g_m1_prefetch_bytes.store(s.m1_prefetch_bytes);
}

SmallMPrefetchLevel small_m_prefetch_level() {
  return builtin_state::g_prefetch_l2.load() ? SmallMPrefetchLevel::kL2 : SmallMPrefetchLevel::kL1;
}

void set_small_m_prefetch_level(SmallMPrefetchLevel level) {
  builtin_state::g_prefetch_l2.store(level == SmallMPrefetchLevel::kL2);
}

const char* prefetch_level_name(SmallMPrefetchLevel level) { return level == SmallMPrefetchLevel::kL2 ? "L2" : "L1"; }

}  // namespace dayzero::kernels::cpu::gemm
