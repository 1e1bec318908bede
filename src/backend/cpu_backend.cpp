// The CPU backend: host tensors, ops from kernels/cpu. It is the reference that every other
// backend and every partitioned run is compared against.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tune.h"
#include "kernels/cpu/router.h"
#include "kernels/ops.h"
#include "backend/backend.h"

namespace dayzero::backend {
namespace kc = kernels::cpu;

namespace {

// A forward pass allocates and frees its activations layer after layer (a 512-token prefill of a
// 576-wide model: some 16 MB per layer). glibc's default lets each free hand the top of the heap
// back to the kernel and maps a first tensor above its adaptive threshold afresh, so every layer
// faulted its pages in again (about 6% of a prefill's time in page faults). Fixed thresholds keep
// tensors below 32 MiB in the heap and up to 512 MiB of freed heap for reuse; larger ones (most
// weights of a large model) are still mapped and unmapped one by one.
void keep_freed_tensor_memory() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    return true;
  }();
  (void)done;
}

float* f(Tensor& t) { return t.f32(); }
const float* f(const Tensor& t) { return t.f32(); }

const uint16_t* u16(const Tensor& t) { return static_cast<const uint16_t*>(t.data()); }

// t's elements as f32 into dst (numel floats): exact for F32, BF16 and F16.
void widen(const Tensor& t, float* dst) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32: std::memcpy(dst, t.data(), static_cast<size_t>(n) * 4); return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(u16(t)[i]);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(u16(t)[i]);
      return;
    default: DZ_CHECK(false, "cpu: cannot widen a " << dtype_name(t.dtype()) << " tensor to f32");
  }
}

// A weight operand of an element-wise op as f32: its own storage when it is f32, else widened
// into `scratch` (a weight kept in bf16: a norm's scale, a bias, a position table). Vectors and
// small tables only, so the copy is small beside the op.
const float* f32_operand(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype() == DType::kF32) return f(t);
  scratch.resize(static_cast<size_t>(t.numel()));
  widen(t, scratch.data());
  return scratch.data();
}


// A quantized weight kept as stored: one host allocation of its slice's held_bytes (the plan's
// count: core/stored_format.h), the scales first, then each row's values, then the global scale
// (NVFP4); the tensor views the values, at offset scale_bytes. The backend finds the layout of a
// weight it is handed by the address of its values (Tensor carries no layout): a registry maps it
// while the storage lives.
struct HeldLayout {
  kc::StoredWeight w;  // q and scale point into the storage
  int64_t rows = 0, cols = 0;
  int64_t scale_bytes = 0;  // the storage's bytes beside the tensor's own: scales, global, rows' padding
};
struct HeldWeights {
  std::mutex mu;
  std::unordered_map<const void*, HeldLayout> by_values;
  std::atomic<int64_t> scale_bytes{0};  // of the live ones
};

class HeldHostStorage final : public Storage {
 public:
  HeldHostStorage(size_t bytes, std::shared_ptr<HeldWeights> registry)
      : inner_(bytes, false), registry_(std::move(registry)) {}
  // Registers the layout once the values and scales are in place.
  void publish(const HeldLayout& layout) {
    key_ = layout.w.q;
    scale_bytes_ = layout.scale_bytes;
    registry_->scale_bytes.fetch_add(scale_bytes_);
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_values[key_] = layout;
  }
  ~HeldHostStorage() override {
    if (!key_) return;
    registry_->scale_bytes.fetch_sub(scale_bytes_);
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_values.erase(key_);
  }
  void* data() override { return inner_.data(); }
  size_t bytes() const override { return inner_.bytes(); }
  Device device() const override { return {}; }

 private:
  HostStorage inner_;
  std::shared_ptr<HeldWeights> registry_;
  const void* key_ = nullptr;
  int64_t scale_bytes_ = 0;
};

// The layout of the weight kept as stored a tensor views, whole (a view of part of one has none).
HeldLayout held_layout_of(HeldWeights& reg, const Tensor& w, const char* op) {
  std::lock_guard<std::mutex> lock(reg.mu);
  const auto it = reg.by_values.find(w.data());
  DZ_CHECK(it != reg.by_values.end(), "cpu " << op << ": a " << dtype_name(w.dtype()) << " tensor "
                                             << shape_str(w.shape()) << " that is not a whole weight of this backend"
                                             << " kept as stored");
  DZ_CHECK(w.numel() == it->second.rows * it->second.cols && w.rank() == 2 && w.dim(1) == it->second.cols,
           "cpu " << op << ": a weight of " << it->second.rows << " x " << it->second.cols
                  << " kept as stored viewed as " << shape_str(w.shape()));
  return it->second;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& o) : budget_(o.memory_budget_bytes), keeps_stored_(o.cpu_keeps_stored) {
    int threads = o.threads;
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    kc::gemm_set_threads(threads);
    keep_freed_tensor_memory();
    if (budget_ <= 0) budget_ = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  }

  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    const auto& g = kc::gemm_info();
    return "cpu: " + g.path + ", " + std::to_string(g.threads) + " GEMM thread(s)" +
           (tuning_.empty() ? "" : "; " + tuning_) + (prefill_tuning_.empty() ? "" : "; " + prefill_tuning_);
  }
  std::string tune(const std::vector<const Tensor*>& weights, const std::string& cache_dir) override {
    tuning_ = kc::gemm::tune_small_m(tune_weights(weights), cache_dir).describe();
    return tuning_;
  }
  std::string tune_prefill(const std::vector<const Tensor*>& weights, const std::string& cache_dir,
                           std::string* chosen) override {
    const kc::gemm::LargeMTuning t = kc::gemm::tune_large_m(tune_weights(weights), cache_dir);
    *chosen = t.chosen;
    prefill_tuning_ = t.describe();
    return prefill_tuning_;
  }
  Status use_prefill_path(const std::string& id) override {
    std::string why;
    if (id.empty()) return Status::Ok();
    if (!kc::gemm::set_large_m_path(id, "timed at start-up on rank 0", &why))
      return Status::Unsupported("the prefill GEMM path rank 0 timed fastest cannot run here: " + why);
    prefill_tuning_ = "large-M path " + id + " (rank 0's choice)";
    return Status::Ok();
  }
  Device device() const override { return {}; }

  Tensor empty(DType dtype, Shape shape) override { return Tensor::host(dtype, std::move(shape)); }
  Tensor empty_output(DType dtype, Shape shape) override {
    return Tensor::host_uninitialized(dtype, std::move(shape));
  }
  Tensor to_device(const Tensor& host) override { return host; }
  // A weight in `kept` (F32 or BF16; plan::kept_dtype): the loader's tensor itself where it
  // already is (no copy), else converted: widened exactly, or rounded once to bf16 (RNE).
  Tensor to_device_weight(const Tensor& host, DType kept) override {
    DZ_CHECK(kept == DType::kF32 || kept == DType::kBF16,
             "cpu to_device_weight: keeps weights in float32 or bfloat16, not " << dtype_name(kept));
    if (host.dtype() == kept || !dtype_is_float(host.dtype())) return host;
    Tensor wide = Tensor::host_uninitialized(DType::kF32, host.shape());
    widen(host, f(wide));
    if (kept == DType::kF32) return wide;
    Tensor t = Tensor::host_uninitialized(DType::kBF16, host.shape());
    auto* dst = static_cast<uint16_t*>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = f32_to_bf16(f(wide)[i]);
    return t;
  }
  bool wants_stored_dtype() const override { return keeps_stored_; }
  bool keeps_stored(StoredScheme scheme) const override {
    (void)scheme;
    return keeps_stored_;
  }
  // The scales, values and global scale copied as they are into one allocation
  // (HeldHostStorage). A NaN FP8 byte (E4M3 0x7f / 0xff; E5M2 exponent all ones) has no
  // value to keep: the loader refuses such a weight by name (its NaN count) before it gets here;
  // refused here too.
  Tensor to_device_stored(const StoredWeightSlice& w) override {
    DZ_CHECK(keeps_stored_, "cpu to_device_stored: this backend keeps weights in f32 (cpu_keeps_stored is off)");
    const std::string bad = w.shape_error();
    DZ_CHECK(bad.empty() && w.values.device().is_cpu() && w.scale.device().is_cpu(), "cpu to_device_stored: " << bad);
    const StoredSlice& sl = w.slice;
    const StoredFormat& f = *sl.format;
    const bool e5m2 = w.values.dtype() == DType::kF8_E5M2;
    const auto* q = static_cast<const uint8_t*>(w.values.data());
    if (f.scheme == StoredScheme::kFp8Block) {
      for (int64_t i = 0; i < sl.rows * sl.cols; ++i) {
        const bool nan = e5m2 ? (q[i] & 0x7c) == 0x7c : (q[i] & 0x7f) == 0x7f;
        DZ_CHECK(!nan, "cpu to_device_stored: byte " << i << " of an FP8 weight " << sl.rows << " x " << sl.cols
                                                     << " is 0x" << std::hex << int{q[i]} << std::dec
                                                     << " (not a finite value)");
      }
    }
    const bool empty = sl.rows <= 0 || sl.cols <= 0;
    const size_t scale_bytes = empty ? 0 : w.scale.bytes(), q_bytes = empty ? 0 : w.values.bytes();
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, sl.held_bytes()));
    DZ_CHECK(empty || bytes == scale_bytes + q_bytes + static_cast<size_t>(f.global_scale_bytes),
             "cpu to_device_stored: " << bytes << " bytes held for " << scale_bytes << " + " << q_bytes);
    auto st = std::make_shared<HeldHostStorage>(bytes, stored_);
    auto* base = static_cast<char*>(st->data());
    if (scale_bytes) std::memcpy(base, w.scale.data(), scale_bytes);
    if (q_bytes) std::memcpy(base + scale_bytes, q, q_bytes);
    if (!empty && f.global_scale_bytes) std::memcpy(base + scale_bytes + q_bytes, &w.global_scale, 4);
    Tensor t(w.held_dtype(), {sl.rows, sl.cols}, st, scale_bytes);
    HeldLayout layout;
    layout.w = {f.scheme, reinterpret_cast<const uint8_t*>(base + scale_bytes), base, empty ? 0 : w.values.dim(1),
                empty ? 0 : sl.scale_cols(), sl.row0, sl.col0, sl.block_rows, sl.block_cols, e5m2, w.global_scale};
    layout.rows = sl.rows;
    layout.cols = sl.cols;
    layout.scale_bytes = static_cast<int64_t>(bytes) - static_cast<int64_t>(t.bytes());
    st->publish(layout);
    return t;
  }
  // A bf16 weight into an f32 host tensor is widened, one kept as stored dequantised; otherwise
  // the bytes are copied.
  void to_host(const Tensor& src, Tensor& dst) override { copy(src, dst); }
  void copy(const Tensor& src, Tensor& dst) override {
    if (is_stored_weight_dtype(src.dtype()) && dst.dtype() == DType::kF32 && src.numel() == dst.numel()) {
      const HeldLayout l = stored_of(src, "copy");
      return kc::dequantise_stored_rows(l.w, l.cols, 0, l.rows, f(dst));
    }
    if (src.dtype() != dst.dtype() && dst.dtype() == DType::kF32 && src.numel() == dst.numel())
      return widen(src, f(dst));
    DZ_CHECK(src.bytes() == dst.bytes(), "copy " << shape_str(src.shape()) << " -> " << shape_str(dst.shape()));
    if (src.data() != dst.data()) std::memcpy(dst.data(), src.data(), src.bytes());
  }
  void synchronize() override {}
  MemoryInfo memory_info() const override {
    const int64_t peak = peak_rss_bytes();
    MemoryInfo m{budget_, budget_ - peak, peak};
    m.weight_scale_bytes = stored_->scale_bytes.load();
    return m;
  }

  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) override {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    DZ_CHECK(x.numel() == m * k && y.numel() == m * n,
             "matmul x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y" << shape_str(y.shape()));
    if (w.dtype() == DType::kBF16) return kc::matmul_nt_bf16(m, n, k, f(x), u16(w), f(y), accumulate);
    if (is_stored_weight_dtype(w.dtype()))
      return kc::matmul_nt_stored(m, n, k, f(x), stored_of(w, "matmul").w, f(y), accumulate);
    kc::matmul_nt(m, n, k, f(x), f(w), f(y), accumulate);
  }
  void matmul_shared_x(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys) override {
    DZ_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= kc::kMaxSharedXProducts);
    const int64_t k = ws[0]->dim(1), m = x.numel() / k;
    std::array<kc::NtProduct, kc::kMaxSharedXProducts> products;
    std::array<kc::StoredWeight, kc::kMaxSharedXProducts> stored;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Tensor& w = *ws[i];
      Tensor& y = *ys[i];
      DZ_CHECK(w.dim(1) == k && x.numel() == m * k && y.numel() == m * w.dim(0) &&
                   (w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || is_stored_weight_dtype(w.dtype())),
               "matmul_shared_x x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y"
                                   << shape_str(y.shape()));
      if (is_stored_weight_dtype(w.dtype())) {
        stored[i] = stored_of(w, "matmul_shared_x").w;
        products[i] = {w.dim(0), &stored[i], kc::WeightKind::kStored, f(y)};
      } else {
        products[i] = {w.dim(0), w.data(), w.dtype() == DType::kBF16 ? kc::WeightKind::kBF16 : kc::WeightKind::kF32,
                       f(y)};
      }
    }
    kc::matmul_nt_shared_x(m, k, f(x), products.data(), static_cast<int>(ws.size()));
  }
  void add_bias(const Tensor& b, Tensor& y) override {
    const int64_t width = b.numel();
    DZ_CHECK(y.numel() % width == 0);
    kc::add_bias(y.numel() / width, width, f32_operand(b, scratch_), f(y));
  }
  void add(const Tensor& x, Tensor& y) override {
    DZ_CHECK(x.numel() == y.numel());
    kc::add_inplace(x.numel(), f32_operand(x, scratch_), f(y));
  }
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const int64_t width = w.numel();
    DZ_CHECK(x.numel() % width == 0 && x.numel() == y.numel());
    kc::rmsnorm(x.numel() / width, width, f(x), f32_operand(w, scratch_), eps, f(y));
  }
  void add_rmsnorm(const Tensor& delta, Tensor& residual, const Tensor& w, float eps, Tensor& y) override {
    const int64_t width = w.numel();
    DZ_CHECK(delta.numel() == residual.numel() && residual.numel() % width == 0 && residual.numel() == y.numel());
    kc::add_rmsnorm(residual.numel() / width, width, f(delta), f(residual), f32_operand(w, scratch_), eps, f(y));
  }
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) override {
    DZ_CHECK(x.rank() == 3 && positions.dtype() == DType::kI32 && positions.numel() == x.dim(0));
    DZ_CHECK(inv_freq.numel() * 2 == x.dim(2));
    const auto* pos = static_cast<const int32_t*>(positions.data());
    const int64_t n = x.dim(0), half = inv_freq.numel();
    // The cos/sin table of the last positions and inv_freq, kept: every layer of a forward rotates
    // q and k at the same ones. Compared by value, so a new forward never reuses a stale table.
    RopeTable& t = rope_table_;
    if (!std::equal(pos, pos + n, t.positions.begin(), t.positions.end()) ||
        !std::equal(f(inv_freq), f(inv_freq) + half, t.inv_freq.begin(), t.inv_freq.end())) {
      t.positions.assign(pos, pos + n);
      t.inv_freq.assign(f(inv_freq), f(inv_freq) + half);
      t.cos.resize(n * half);
      t.sin.resize(n * half);
      kc::rope_angles(n, half, pos, f(inv_freq), t.cos.data(), t.sin.data());
    }
    kc::rope_rotate_half_table(n, x.dim(1), x.dim(2), t.cos.data(), t.sin.data(), f(x));
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0, float scale,
                 Tensor& out) override {
    DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape());
    DZ_CHECK(pos0 + q.dim(0) <= k.dim(0), "attention past the cache end");
    kc::attention_causal(q.dim(0), q.dim(1), k.dim(1), q.dim(2), pos0, f(q), f(k), f(v), scale, f(out));
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override {
    DZ_CHECK(gate.numel() == up.numel() && up.numel() == out.numel());
    kc::swiglu(gate.numel(), f(gate), f(up), f(out));
  }
  void embedding(const Tensor& ids, const Tensor& table, int64_t row_offset, Tensor& out) override {
    DZ_CHECK(ids.dtype() == DType::kI32 && out.numel() == ids.numel() * table.dim(1));
    const auto* id = static_cast<const int32_t*>(ids.data());
    const int64_t width = table.dim(1), rows = table.dim(0);
    if (row_offset == 0) {
      bool all_inside = true;
      for (int64_t t = 0; t < ids.numel(); ++t) all_inside &= id[t] >= 0 && id[t] < rows;
      if (all_inside && table.dtype() == DType::kF32)
        return kc::embedding(ids.numel(), id, rows, width, f(table), f(out));
    }
    const bool bf16 = table.dtype() == DType::kBF16;  // a table kept as stored: rows widened
    DZ_CHECK(bf16 || table.dtype() == DType::kF32, "cpu embedding: a " << dtype_name(table.dtype()) << " table");
    for (int64_t t = 0; t < ids.numel(); ++t) {
      const int64_t r = id[t] - row_offset;
      float* dst = f(out) + t * width;
      if (r < 0 || r >= rows) std::memset(dst, 0, static_cast<size_t>(width) * 4);
      else if (!bf16) std::memcpy(dst, f(table) + r * width, static_cast<size_t>(width) * 4);
      else
        for (int64_t i = 0; i < width; ++i) dst[i] = bf16_to_f32(u16(table)[r * width + i]);
    }
  }

  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) override {
    const int64_t width = w.numel();
    DZ_CHECK(x.numel() % width == 0 && x.numel() == y.numel() && (!b || b->numel() == width));
    kc::layernorm(x.numel() / width, width, f(x), f32_operand(w, scratch_), b ? f32_operand(*b, scratch2_) : nullptr,
                  eps, f(y));
  }
  void gelu(GeluKind kind, const Tensor& x, Tensor& y) override {
    DZ_CHECK(x.numel() == y.numel());
    const kc::GeluKind k = kind == GeluKind::kErf    ? kc::GeluKind::kErf
                           : kind == GeluKind::kTanh ? kc::GeluKind::kTanh
                                                     : kc::GeluKind::kQuick;
    kc::gelu(x.numel(), k, f(x), f(y));
  }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) override {
    DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape());
    DZ_CHECK(k.dim(0) == q.dim(0) && q.dim(1) % k.dim(1) == 0 && q.dim(2) == k.dim(2));
    kc::attention_full(q.dim(0), q.dim(1), k.dim(1), q.dim(2), f(q), f(k), f(v), scale, f(out));
  }
  void route_topk(const Tensor& logits, const Tensor* bias, const RouterOptions& o, Tensor& ids,
                  Tensor& weights) override {
    check_route_args(logits, bias, o, ids, weights);
    const int64_t n = logits.dim(0), ne = logits.dim(1);
    auto* id = static_cast<int32_t*>(ids.data());
    if (o.kind == RouterOptions::Kind::kSoftmax)
      return kc::route_softmax_topk(n, ne, o.k, o.renormalize, f(logits), id, f(weights));
    const kc::GroupRoute g{o.n_group, o.topk_group, o.renormalize, o.scaling};
    kc::route_sigmoid_group_topk(n, ne, o.k, g, f(logits), bias ? f32_operand(*bias, scratch_) : nullptr, id,
                                 f(weights));
  }

 private:
  struct RopeTable {
    std::vector<int32_t> positions;
    std::vector<float> inv_freq, cos, sin;  // cos, sin [positions, inv_freq]
  };
  HeldLayout stored_of(const Tensor& w, const char* op) const { return held_layout_of(*stored_, w, op); }

  int64_t budget_;
  bool keeps_stored_;
  std::shared_ptr<HeldWeights> stored_ = std::make_shared<HeldWeights>();
  // The 2-D f32 and bf16 weights, as the GEMM tuning takes them.
  static std::vector<kc::gemm::TuneWeight> tune_weights(const std::vector<const Tensor*>& weights) {
    std::vector<kc::gemm::TuneWeight> tw;
    for (const Tensor* t : weights)
      if (t->rank() == 2 && (t->dtype() == DType::kF32 || t->dtype() == DType::kBF16))
        tw.push_back({t->dim(0), t->dim(1), t->data(), t->dtype() == DType::kBF16});
    return tw;
  }

  std::string tuning_;          // tune()'s outcome, named by describe()
  std::string prefill_tuning_;  // tune_prefill()'s, likewise
  RopeTable rope_table_;
  std::vector<float> scratch_, scratch2_;  // bf16 weight operands widened (f32_operand)
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options) {
  // A kernel path asked for by name (DAYZERO_CPU_ISA, DAYZERO_GEMM, DAYZERO_GEMM_LARGE_M) runs, or
  // the run does not start: a comparison of paths must never compare the default with itself.
  if (const std::string why = kc::gemm::kernel_path_request_error(); !why.empty())
    return Status::InvalidArgument("cpu kernels: " + why);
  return std::unique_ptr<Backend>(new CpuBackend(options));
}

}  // namespace dayzero::backend
