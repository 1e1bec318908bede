// Picks the GEMM paths once per process and implements the ops.h GEMM entry points (gemm_info,
// gemm_set_threads, matmul_nt, matmul_nt_bf16, matmul_nt_stored, matmul_nt_shared_x). The rule
// is fixed, so the same shape takes the same path (and bits); a run's start-up timing (gemm_tune.cpp)
// may then replace its large-M path (set_large_m_path: one choice per job, cached per machine) and
// picks how the small-M kernel streams w, never what it sums. The rule: the built-in kernel for
// small M (1 <= m <= kSmallM, decode batches), and for the rest OpenBLAS on the widest core this CPU
// runs (forcing it when the library's own detection fell back), else BLIS, else the built-in
// kernel; each only after it matches the double-precision reference on small shapes.
// DAYZERO_GEMM=openblas|blis|builtin|onednn runs one path at every M. docs/gemm.md has the
// measurements.
#include <cpuid.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace dayzero::kernels::cpu {
namespace gemm {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

struct CoreName {
  const char* name;
  IsaClass isa;
};
// OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the widest kernels they run.
// "Unknown" is what the library reports when it recognised nothing.
constexpr CoreName kCores[] = {
    {"Unknown", IsaClass::kSse},        {"Katmai", IsaClass::kSse},        {"Coppermine", IsaClass::kSse},
    {"Northwood", IsaClass::kSse},      {"Prescott", IsaClass::kSse},      {"Banias", IsaClass::kSse},
    {"Atom", IsaClass::kSse},           {"Core2", IsaClass::kSse},         {"Penryn", IsaClass::kSse},
    {"Dunnington", IsaClass::kSse},     {"Nehalem", IsaClass::kSse},       {"Athlon", IsaClass::kSse},
    {"Opteron", IsaClass::kSse},        {"Opteron_SSE3", IsaClass::kSse},  {"Barcelona", IsaClass::kSse},
    {"Nano", IsaClass::kSse},           {"Bobcat", IsaClass::kSse},        {"Sandybridge", IsaClass::kAvx},
    {"Bulldozer", IsaClass::kAvx},      {"Piledriver", IsaClass::kAvx},    {"Steamroller", IsaClass::kAvx},
    {"Excavator", IsaClass::kAvx},      {"Haswell", IsaClass::kAvx2},      {"Zen", IsaClass::kAvx2},
    {"SkylakeX", IsaClass::kAvx512},    {"Cooperlake", IsaClass::kAvx512}, {"SapphireRapids", IsaClass::kAvx512},
};

uint32_t next_random(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state;
}

void fill_random(std::vector<float>& v, uint32_t seed) {
  for (float& f : v) f = static_cast<float>(next_random(&seed) >> 8) / 8388608.0f - 1.0f;  // [-1, 1)
}

}  // namespace

const char* isa_name(IsaClass c) {
  switch (c) {
    case IsaClass::kSse: return "sse";
    case IsaClass::kAvx: return "avx";
    case IsaClass::kAvx2: return "avx2";
    case IsaClass::kAvx512: return "avx512";
  }
  return "?";
}

std::string CpuIsa::describe() const {
  return std::string(isa_name(best)) + (amd ? " (AMD)" : " (Intel or other)");
}

CpuIsa detect_isa() {
  CpuIsa isa;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return isa;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  isa.amd = std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  isa.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  // The CPU having a register file is not enough: the OS must save it (XCR0), or the first
  // context switch corrupts it. Hypervisors do hide AVX-512 this way.
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  unsigned b7 = 0;
  if (max_leaf >= 7) __get_cpuid_count(7, 0, &a, &b7, &c, &d);
  const bool avx2 = b7 & (1u << 5);
  // OpenBLAS's SkylakeX kernels use F, DQ, BW and VL.
  const bool avx512 = (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
  if (avx && os_ymm) isa.best = IsaClass::kAvx;
  if (isa.best == IsaClass::kAvx && avx2 && fma) isa.best = IsaClass::kAvx2;
  if (isa.best == IsaClass::kAvx2 && avx512 && os_zmm) isa.best = IsaClass::kAvx512;
  return isa;
}

bool openblas_core_class(std::string_view core, IsaClass* out) {
  for (const CoreName& c : kCores) {
    if (core.size() == std::strlen(c.name) && strncasecmp(core.data(), c.name, core.size()) == 0) {
      *out = c.isa;
      return true;
    }
  }
  return false;
}

std::string openblas_core_for(const CpuIsa& isa) {
  switch (isa.best) {
    case IsaClass::kAvx512: return "SkylakeX";
    case IsaClass::kAvx2: return isa.amd ? "Zen" : "Haswell";
    case IsaClass::kAvx: return "Sandybridge";
    case IsaClass::kSse: return "Prescott";
  }
  return "Prescott";
}

CoreDecision decide_openblas_core(const CpuIsa& isa, std::string_view detected_core, const char* user_coretype) {
  const std::string detected(detected_core);
  if (user_coretype != nullptr && *user_coretype != '\0') {
    return {"", false, std::string("OPENBLAS_CORETYPE=") + user_coretype + " from the environment; honoured"};
  }
  IsaClass detected_isa;
  if (!openblas_core_class(detected, &detected_isa)) {
    return {"", false, "library chose " + detected + ", a core dayzero does not know; left alone"};
  }
  if (detected_isa == isa.best) return {"", false, "as detected by the library"};
  const std::string want = openblas_core_for(isa);
  const char* direction = detected_isa < isa.best ? "" : " (wider than this CPU and OS run)";
  return {want, true,
          "library detected " + detected + direction + " on an " + isa_name(isa.best) + " CPU; forced " + want};
}

void matmul_nt_reference(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                         float beta) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * double(w[j * k + p]);
      y[i * n + j] = static_cast<float>(s + (beta != 0.0f ? double(beta) * y[i * n + j] : 0.0));
    }
  }
}

std::vector<VerifyShape> verify_shapes() {
  // Odd sizes reach every edge tile; m = 1 takes the GEMV routine; 64x96x256 is big enough
  // for the libraries to split it across threads.
  return {{1, 37, 133, 0}, {1, 45, 70, 1}, {5, 33, 70, 0}, {19, 67, 131, 1}, {64, 96, 256, 0}};
}

bool verify_path(GemmPath& path, std::string* detail) {
  uint32_t seed = 1;
  for (const VerifyShape& c : verify_shapes()) {
    std::vector<float> x(c.m * c.k), w(c.n * c.k), y(c.m * c.n), ref(c.m * c.n);
    fill_random(x, seed++);
    fill_random(w, seed++);
    fill_random(y, seed++);
    ref = y;
    path.matmul_nt(c.m, c.n, c.k, x.data(), w.data(), y.data(), c.beta);
    matmul_nt_reference(c.m, c.n, c.k, x.data(), w.data(), ref.data(), c.beta);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        // f32 summation of k products: error grows like k * eps * sum |x w| at worst.
        double bound = 0;
        for (int64_t p = 0; p < c.k; ++p) bound += std::fabs(double(x[i * c.k + p]) * w[j * c.k + p]);
        bound = 1e-6 + 2.0 * c.k * 6e-8 * bound;
        const double got = y[i * c.n + j], want = ref[i * c.n + j];
        if (!(std::fabs(got - want) <= bound)) {
          *detail = path.name() + ": m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                    " k=" + std::to_string(c.k) + " beta=" + std::to_string(c.beta) + ": y[" + std::to_string(i) +
                    "," + std::to_string(j) + "] = " + std::to_string(got) + ", reference " + std::to_string(want);
          return false;
        }
      }
    }
  }
  return true;
}

namespace {

class ByRows;

struct Selection {
  GemmPath* path = nullptr;
  GemmInfo info;
  bool small_m_builtin = false;  // m <= kSmallM takes the built-in kernel (the ByRows rule)
  ByRows* rule = nullptr;        // the rule when it is the path (its large-M path may be switched)
  std::string rule_id;           // the id of the path the fixed rule chose for m > kSmallM
  std::string large_id;          // the id of the path m > kSmallM takes now
  std::string large_reason;      // why: "as detected by the library", "timed at start-up"
  std::string rule_reason;       // the rule's why
  std::string notes;             // "; "-joined notes of the selection (libraries missing, ...)
  std::string request_failure;   // why DAYZERO_GEMM or DAYZERO_GEMM_LARGE_M could not be honoured
  bool large_pinned = false;     // DAYZERO_GEMM_LARGE_M chose the large-M path
};

// Rows up to which the built-in kernel's small-M tiles (every x row in cache, w streamed once
// with prefetch, split over dayzero's own pool) beat OpenBLAS's packing sgemm, its sgemv, BLIS
// and oneDNN on this project's decode shapes (docs/gemm.md, "Small M").
constexpr int64_t kSmallM = 16;

// Two paths chosen by the number of rows: a fixed rule, so the same shape always takes the
// same path and its bits do not depend on anything else; only the start-up timing of a run
// (set_large_m_path, before any product) switches the large-M path.
class ByRows final : public GemmPath {
 public:
  ByRows(GemmPath* small, GemmPath* large) : small_(small), large_(large) {}
  std::string name() const override {
    return small_->name() + " at m <= " + std::to_string(kSmallM) + "; " + large_.load()->name();
  }
  void set_threads(int n) override {
    small_->set_threads(n);
    large_.load()->set_threads(n);
  }
  void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y,
                 float beta) override {
    (m <= kSmallM ? small_ : large_.load(std::memory_order_acquire))->matmul_nt(m, n, k, x, w, y, beta);
  }
  GemmPath* small() const { return small_; }
  void set_large(GemmPath* p) { large_.store(p, std::memory_order_release); }

 private:
  GemmPath* small_;
  std::atomic<GemmPath*> large_;
};

// OpenBLAS on the core the rule wants; nullptr (with notes) when it cannot be used.
// `runs_m1`: whether m = 1 reaches this path (not when the small-M path takes it).
GemmPath* try_openblas(const CpuIsa& isa, bool runs_m1, std::string* reason, std::vector<std::string>* notes) {
  std::string why;
  OpenBlas* lib = OpenBlas::get(&why);
  if (!lib) {
    notes->push_back(why);
    return nullptr;
  }
  CoreDecision decision = decide_openblas_core(isa, lib->detected_core(), std::getenv("OPENBLAS_CORETYPE"));
  *reason = decision.reason;
  if (decision.force) {
    std::string detail;
    if (!lib->force_core(decision.core, &why)) {
      notes->push_back("could not force OpenBLAS core " + decision.core + ": " + why);
      lib->force_core(lib->detected_core(), &why);
      *reason = "library detected " + lib->detected_core() + "; forcing " + decision.core + " failed";
    } else if (!verify_path(*lib, &detail)) {
      notes->push_back("forced core gave wrong results (" + detail + "); reverted");
      lib->force_core(lib->detected_core(), &why);
      *reason = "library detected " + lib->detected_core() + "; forced " + decision.core + " was wrong";
    }
  }
  if (runs_m1) *reason += "; m = 1 via sgemv";
  return lib;
}

Selection choose_path() {
  Selection s;
  const CpuIsa isa = detect_isa();
  const int threads = kernel_threads();
  std::vector<std::string> order = {"openblas", "blis", "builtin"};
  std::vector<std::string> notes;
  bool by_rows = true;  // the built-in kernel at small M, unless one path was asked for
  if (const char* want = std::getenv("DAYZERO_GEMM"); want && *want) {
    order.push_back("onednn");
    auto it = std::find(order.begin(), order.end(), std::string(want));
    if (it == order.end()) {
      s.request_failure = std::string("DAYZERO_GEMM=") + want + " is not one of openblas, blis, onednn, builtin";
      order.pop_back();
    } else {
      std::rotate(order.begin(), it, it + 1);
      by_rows = false;
    }
  }
  for (const std::string& candidate : order) {
    std::string reason, why;
    GemmPath* path = nullptr;
    if (candidate == "openblas") {
      path = try_openblas(isa, !by_rows, &reason, &notes);
    } else if (candidate == "blis") {
      path = blis(&why);
      if (!path) notes.push_back(why);
      reason = by_rows ? "library's own CPU detection" : "library's own CPU detection; m = 1 via bli_sgemv";
    } else if (candidate == "onednn") {
      path = onednn(&why);
      if (!path) notes.push_back(why);
      reason = "DAYZERO_GEMM=onednn; every m";
    } else {
      path = builtin();
      reason = "compiled for this CPU";
    }
    if (!path) continue;
    path->set_threads(threads);
    std::string detail;
    if (!verify_path(*path, &detail)) {
      notes.push_back("rejected, wrong results: " + detail);
      continue;
    }
    s.path = path;
    s.small_m_builtin = path == builtin();
    s.info.path = path->name() + " (" + reason + ")";
    s.rule_id = s.large_id = candidate;
    s.rule_reason = s.large_reason = reason;
    break;
  }
  DZ_CHECK(s.path != nullptr, "no GEMM path passed verification: " << (notes.empty() ? "" : notes.back()));
  if (!by_rows && s.rule_id != order.front() && s.request_failure.empty())
    s.request_failure = "DAYZERO_GEMM=" + order.front() + " cannot run here: " + (notes.empty() ? "" : notes.front());
  GemmPath* small = by_rows && s.path != builtin() ? builtin() : nullptr;
  if (small) {
    small->set_threads(threads);
    std::string detail;
    if (verify_path(*small, &detail)) {
      static ByRows rule(small, s.path);
      s.path = &rule;
      s.rule = &rule;
      s.small_m_builtin = true;
      s.info.path = small->name() + " at m <= " + std::to_string(kSmallM) + "; " + s.info.path;
    } else {
      notes.push_back("small-M path rejected, wrong results: " + detail);
    }
  }
  for (const std::string& note : notes) s.notes += "; " + note;
  s.info.path += s.notes;
  s.info.threads = threads;
  return s;
}

GemmPath* load_large_m_path(const Selection& s, const std::string& id, std::string* why);

// DAYZERO_GEMM_LARGE_M: the large-M path pinned (the start-up timing leaves it alone), so a test
// or a comparison of two runs can run one path on purpose.
void pin_large_m_path(Selection& s) {
  const char* want = std::getenv("DAYZERO_GEMM_LARGE_M");
  if (!want || !*want || !s.request_failure.empty()) return;
  if (!s.rule) {
    s.request_failure = "DAYZERO_GEMM_LARGE_M: one GEMM path runs every m here (DAYZERO_GEMM or no small-M path)";
    return;
  }
  std::string why;
  GemmPath* path = load_large_m_path(s, want, &why);
  if (!path) {
    s.request_failure = std::string("DAYZERO_GEMM_LARGE_M=") + want + " cannot run here: " + why;
    return;
  }
  s.rule->set_large(path);
  s.large_id = want;
  s.large_pinned = true;
  s.large_reason = "DAYZERO_GEMM_LARGE_M";
  s.info.path = s.rule->small()->name() + " at m <= " + std::to_string(kSmallM) + "; " + path->name() + " (" +
                s.large_reason + ")" + s.notes;
}

Selection& selection() {
  static Selection s = [] {
    Selection chosen = choose_path();
    pin_large_m_path(chosen);
    return chosen;
  }();
  return s;
}

}  // namespace

GemmPath& selected_path() { return *selection().path; }

namespace {
std::mutex g_large_mu;  // large_m_paths / set_large_m_path: one at a time
}  // namespace

namespace {

constexpr const char* kLargeMIds[] = {"openblas", "blis", "onednn", "builtin"};

// The path `id` loaded, its threads set and verified (the rule's own path was verified when it
// was chosen); nullptr with *why otherwise. REQUIRES: g_large_mu held.
GemmPath* load_large_m_path(const Selection& s, const std::string& id, std::string* why) {
  GemmPath* path = nullptr;
  if (id == "openblas") path = OpenBlas::get(why);  // as the rule set it up (its core forced when it was)
  else if (id == "blis") path = blis(why);
  else if (id == "onednn") path = onednn(why);
  else if (id == "builtin") path = builtin();
  else *why = "GEMM path '" + id + "' is not openblas, blis, onednn or builtin";
  if (!path || id == s.rule_id) return path;
  path->set_threads(kernel_threads());
  std::string detail;
  if (!verify_path(*path, &detail)) {
    *why = id + " rejected, wrong results: " + detail;
    return nullptr;
  }
  return path;
}

}  // namespace

std::vector<LargeMPath> large_m_paths(std::vector<std::string>* notes) {
  std::lock_guard<std::mutex> lock(g_large_mu);
  Selection& s = selection();
  std::vector<LargeMPath> out;
  if (!s.rule) return out;
  std::string why;
  out.push_back({s.rule_id, load_large_m_path(s, s.rule_id, &why)});
  for (const char* id : kLargeMIds) {
    if (id == s.rule_id) continue;
    if (GemmPath* path = load_large_m_path(s, id, &why)) out.push_back({id, path});
    else if (notes) notes->push_back(why);
  }
  return out;
}

std::string large_m_path_id() { return selection().large_id; }

bool large_m_path_pinned() { return selection().large_pinned; }

std::string gemm_request_failure() { return selection().request_failure; }

std::string large_m_rule_id() { return selection().rule_id; }

bool set_large_m_path(const std::string& id, const std::string& how, std::string* why) {
  std::lock_guard<std::mutex> lock(g_large_mu);
  Selection& s = selection();
  if (!s.rule) {
    *why = "one GEMM path runs every M (DAYZERO_GEMM): the large-M path is not switched";
    return false;
  }
  if (s.large_pinned && id != s.large_id) {
    *why = "the large-M path is pinned to " + s.large_id + " (DAYZERO_GEMM_LARGE_M)";
    return false;
  }
  GemmPath* path = load_large_m_path(s, id, why);
  if (!path) return false;
  s.rule->set_large(path);
  if (id != s.large_id) s.large_reason = id == s.rule_id ? s.rule_reason : how;
  s.large_id = id;
  s.info.path = s.rule->small()->name() + " at m <= " + std::to_string(kSmallM) + "; " + path->name() + " (" +
                s.large_reason + ")" + s.notes;
  return true;
}

}  // namespace gemm

const GemmInfo& gemm_info() { return gemm::selection().info; }

void gemm_set_threads(int n) {
  n = std::max(1, n);
  gemm::Selection& s = gemm::selection();
  set_kernel_threads(n);
  s.path->set_threads(n);
  s.info.threads = n;
}

namespace {

// Checks the shape; true when y already holds the product (m or n 0; k 0: zeros, or y itself
// when accumulating), so there is nothing to multiply.
bool empty_product(const char* op, int64_t m, int64_t n, int64_t k, float* y, bool accumulate) {
  DZ_CHECK(m >= 0 && n >= 0 && k >= 0, op << " " << m << "x" << n << "x" << k);
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  if (!accumulate) std::fill(y, y + m * n, 0.0f);
  return true;
}

}  // namespace

void matmul_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y, bool accumulate) {
  if (empty_product("matmul_nt", m, n, k, y, accumulate)) return;
  gemm::selected_path().matmul_nt(m, n, k, x, w, y, accumulate ? 1.0f : 0.0f);
}

namespace {

// y (+)= x · w^T above the small-M kernel, for a weight not stored in f32: panels of about 2 MiB
// of rows of w converted to f32 (convert(j0, rows, out)) take the selected path's large-M GEMM.
// The conversion (n * k once) is small beside the m * n * k multiply-adds of the GEMM it feeds,
// and the panel stays in L2/L3 for it.
template <typename Convert>
void matmul_nt_panels(int64_t m, int64_t n, int64_t k, const float* x, float* y, bool accumulate,
                      const Convert& convert) {
  const gemm::Selection& s = gemm::selection();
  const int64_t nb = std::clamp<int64_t>((int64_t{2} << 20) / (4 * k), 16, n);
  thread_local std::vector<float> wf, yf;
  wf.resize(static_cast<size_t>(nb * k));
  yf.resize(static_cast<size_t>(m * nb));
  for (int64_t j0 = 0; j0 < n; j0 += nb) {
    const int64_t jn = std::min(nb, n - j0);
    convert(j0, jn, wf.data());
    s.path->matmul_nt(m, jn, k, x, wf.data(), yf.data(), 0.0f);
    for (int64_t i = 0; i < m; ++i) {
      float* yr = y + i * n + j0;
      const float* pr = yf.data() + i * jn;
      if (accumulate)
        for (int64_t j = 0; j < jn; ++j) yr[j] += pr[j];
      else
        std::copy_n(pr, jn, yr);
    }
  }
}

}  // namespace

void matmul_nt_bf16(int64_t m, int64_t n, int64_t k, const float* x, const uint16_t* w, float* y, bool accumulate) {
  if (empty_product("matmul_nt_bf16", m, n, k, y, accumulate)) return;
  if (m <= gemm::kSmallM && gemm::selection().small_m_builtin)
    return gemm::matmul_nt_small_bf16(m, n, k, x, w, y, accumulate ? 1.0f : 0.0f);
  matmul_nt_panels(m, n, k, x, y, accumulate, [&](int64_t j0, int64_t rows, float* out) {
    convert_to_f32(DType::kBF16, w + j0 * k, out, static_cast<size_t>(rows * k));
  });
}

void dequantise_stored_rows(const StoredWeight& w, int64_t k, int64_t j0, int64_t rows, float* out) {
  DZ_CHECK(j0 >= 0 && rows >= 0 && k >= 0,
           "dequantise_stored_rows: rows [" << j0 << ", " << j0 + rows << ") of k " << k);
  gemm::dequantise_stored_rows_builtin(w, k, j0, rows, out);
}

void matmul_nt_stored(int64_t m, int64_t n, int64_t k, const float* x, const StoredWeight& w, float* y,
                      bool accumulate) {
  if (empty_product("matmul_nt_stored", m, n, k, y, accumulate)) return;
  if (m <= gemm::kSmallM && gemm::selection().small_m_builtin)
    return gemm::matmul_nt_small_stored(m, n, k, x, w, y, accumulate ? 1.0f : 0.0f);
  matmul_nt_panels(m, n, k, x, y, accumulate, [&](int64_t j0, int64_t rows, float* out) {
    gemm::dequantise_stored_rows_builtin(w, k, j0, rows, out);
  });
}

void matmul_nt_shared_x(int64_t m, int64_t k, const float* x, const NtProduct* products, int count, bool accumulate) {
  DZ_CHECK(m >= 0 && k >= 0 && count >= 0, "matmul_nt_shared_x " << m << "x" << k << ", " << count << " products");
  if (m >= 1 && k >= 1 && m <= gemm::kSmallM && gemm::selection().small_m_builtin)
    return gemm::matmul_nt_small_shared_x(m, k, x, products, count, accumulate ? 1.0f : 0.0f);
  for (int i = 0; i < count; ++i) {
    const NtProduct& p = products[i];
    switch (p.kind) {
      case WeightKind::kBF16: matmul_nt_bf16(m, p.n, k, x, static_cast<const uint16_t*>(p.w), p.y, accumulate); break;
      case WeightKind::kStored:
        matmul_nt_stored(m, p.n, k, x, *static_cast<const StoredWeight*>(p.w), p.y, accumulate);
        break;
      case WeightKind::kF32: matmul_nt(m, p.n, k, x, static_cast<const float*>(p.w), p.y, accumulate); break;
    }
  }
}

}  // namespace dayzero::kernels::cpu
