// The CUDA backend: device tensors on one GPU, ops from kernels/cuda on one compute stream,
// GEMMs through cuBLAS (bf16 inputs, f32 accumulation; f32 on request), weights staged to the
// device through pinned double buffers on a copy stream and converted there. Activations are
// f32 on the device (the Backend contract); weights are kept in the dtype the plan counted
// (FP8 with its block scales, bf16 or f32), converted per GEMM into a bounded workspace where
// that differs from the compute dtype. Compiled only when the toolkit is found
// (DAYZERO_WITH_CUDA); not the NCCL comm.
#ifdef DAYZERO_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/gemm_workspace.h"
#include "backend/weight_staging.h"
#include "core/log.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace dayzero::backend {
namespace kcu = kernels::cuda;
using kcu::Elem;

namespace {

// A failed device call stops the job: the Backend ops return nothing (STYLE.md: device API
// calls use CHECK macros). The message names the op and the call.
#define DZ_CUDA_CHECK(call, op)                                                                 \
  do {                                                                                          \
    const cudaError_t dz_err_ = (call);                                                         \
    DZ_CHECK(dz_err_ == cudaSuccess, "cuda " << (op) << ": " << #call << ": " << cudaGetErrorString(dz_err_)); \
  } while (0)
#define DZ_STATUS_CHECK(expr)                                  \
  do {                                                         \
    const Status dz_st_ = (expr);                              \
    DZ_CHECK(dz_st_.ok(), dz_st_.message());                   \
  } while (0)

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  const std::string m = "cuda " + what + ": " + cudaGetErrorString(e);
  return e == cudaErrorMemoryAllocation ? Status::OutOfMemory(m) : Status::Internal(m);
}

// Live and peak bytes of this backend's device allocations, and the live bytes of its weights.
struct MemCounter {
  std::atomic<int64_t> live{0}, peak{0}, weights{0};
  void add(int64_t b) {
    const int64_t now = live.fetch_add(b) + b;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  void sub(int64_t b) { live.fetch_sub(b); }
};

// Stream-ordered device memory: allocated and freed on the compute stream, so a temporary
// freed while a kernel that reads it is still queued stays valid until that kernel ran.
class DeviceStorage : public Storage {
 public:
  // weight_bytes: what it counts as weight bytes while it lives (0: not a weight).
  DeviceStorage(void* p, size_t bytes, int device, cudaStream_t stream, std::shared_ptr<MemCounter> counter,
                int64_t weight_bytes)
      : ptr_(p), bytes_(bytes), device_(device), stream_(stream), counter_(std::move(counter)),
        weight_bytes_(weight_bytes) {
    counter_->weights.fetch_add(weight_bytes_);
  }
  ~DeviceStorage() override {
    cudaFreeAsync(ptr_, stream_);
    counter_->sub(static_cast<int64_t>(bytes_));
    counter_->weights.fetch_sub(weight_bytes_);
  }
  void* data() override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return {DeviceKind::kCuda, device_}; }

 private:
  void* ptr_;
  size_t bytes_;
  int device_;
  cudaStream_t stream_;
  std::shared_ptr<MemCounter> counter_;
  int64_t weight_bytes_;
};

// An FP8 weight kept as stored: one allocation of slice.device_bytes(), the f32 scales
// [scale_rows, scale_cols] first, then the FP8 bytes [rows, cols] (the tensor views these,
// at offset slice.scale_bytes()). The backend finds the layout of a weight it is handed by
// the address of its bytes (Tensor carries no layout): Fp8Weights maps it while the storage lives.
struct Fp8Layout {
  const float* scales = nullptr;
  BlockScaledSlice slice;
  bool e5m2 = false;
};
struct Fp8Weights {
  std::mutex mu;
  std::unordered_map<const void*, Fp8Layout> by_bytes;
};

class Fp8Storage final : public DeviceStorage {
 public:
  Fp8Storage(void* p, size_t bytes, int device, cudaStream_t stream, std::shared_ptr<MemCounter> counter,
             std::shared_ptr<Fp8Weights> registry, const Fp8Layout& layout)
      : DeviceStorage(p, bytes, device, stream, std::move(counter), layout.slice.device_bytes()),
        registry_(std::move(registry)),
        key_(static_cast<const char*>(p) + layout.slice.scale_bytes()) {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_bytes[key_] = layout;
  }
  ~Fp8Storage() override {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_bytes.erase(key_);
  }

 private:
  std::shared_ptr<Fp8Weights> registry_;
  const void* key_;
};

Elem elem_of(const Tensor& t, const char* op) {
  DZ_CHECK(!t.device().is_cpu(), "cuda " << op << ": a host tensor " << shape_str(t.shape()) << " was passed");
  if (t.dtype() == DType::kF32) return Elem::kF32;
  DZ_CHECK(t.dtype() == DType::kBF16, "cuda " << op << ": dtype " << dtype_name(t.dtype()) << " not supported");
  return Elem::kBF16;
}

bool is_fp8(DType t) { return t == DType::kF8_E4M3 || t == DType::kF8_E5M2; }
bool is_host_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }
Elem elem_of_host(DType t) { return t == DType::kF32 ? Elem::kF32 : t == DType::kBF16 ? Elem::kBF16 : Elem::kF16; }

// The layout of the FP8 weight a tensor views, whole. A view into part of one (rows()) cannot
// be dequantised with its scales and is refused.
Fp8Layout fp8_of(Fp8Weights& reg, const Tensor& w, const char* op) {
  std::lock_guard<std::mutex> lock(reg.mu);
  const auto it = reg.by_bytes.find(w.data());
  DZ_CHECK(it != reg.by_bytes.end(),
           "cuda " << op << ": an FP8 tensor " << shape_str(w.shape()) << " that is not a whole FP8 weight of this backend");
  DZ_CHECK(w.numel() == it->second.slice.rows * it->second.slice.cols,
           "cuda " << op << ": an FP8 weight of " << it->second.slice.rows << " x " << it->second.slice.cols
                   << " viewed as " << shape_str(w.shape()));
  return it->second;
}

float* f(Tensor& t, const char* op) {
  DZ_CHECK(elem_of(t, op) == Elem::kF32, "cuda " << op << ": expected an f32 tensor");
  return static_cast<float*>(t.data());
}
const float* f(const Tensor& t, const char* op) {
  DZ_CHECK(elem_of(t, op) == Elem::kF32, "cuda " << op << ": expected an f32 tensor");
  return static_cast<const float*>(t.data());
}

constexpr size_t kStagingBytes = size_t{32} << 20;  // per pinned buffer; two of them

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o) : device_(o.device_index), compute_(o.compute_dtype) {}

  Status init() {
    DZ_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"));
    cudaDeviceProp prop{};
    DZ_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties"));
    device_name_ = prop.name;
    sm_ = prop.major * 10 + prop.minor;
    DZ_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    DZ_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
                                   "cudaStreamCreate (copy)"));
    // Freed blocks stay in the pool: the per-token temporaries reuse them instead of calling the driver.
    cudaMemPool_t pool = nullptr;
    DZ_RETURN_IF_ERROR(cuda_status(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool"));
    uint64_t keep = UINT64_MAX;
    DZ_RETURN_IF_ERROR(
        cuda_status(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute"));
    for (int i = 0; i < 2; ++i) {
      DZ_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&pinned_[i], kStagingBytes), "cudaMallocHost (staging)"));
      DZ_RETURN_IF_ERROR(cuda_status(cudaMalloc(&staged_[i], kStagingBytes), "cudaMalloc (staging)"));
      DZ_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&staging_done_[i], cudaEventDisableTiming),
                                     "cudaEventCreate"));
    }
    fixed_bytes_ = 2 * static_cast<int64_t>(kStagingBytes);
    mem_->add(fixed_bytes_);
    DZ_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming), "cudaEventCreate"));
    return gemm_.init(stream_);
  }

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    if (weight_ws_) cudaFreeAsync(weight_ws_, stream_);
    if (act_ws_) cudaFreeAsync(act_ws_, stream_);
    for (int i = 0; i < 2; ++i) {
      if (pinned_[i]) cudaFreeHost(pinned_[i]);
      if (staged_[i]) cudaFree(staged_[i]);
      if (staging_done_[i]) cudaEventDestroy(staging_done_[i]);
    }
    if (order_) cudaEventDestroy(order_);
    // The streams stay alive for storages that outlive the backend (their frees are queued on it).
  }

  std::string name() const override { return "cuda"; }
  std::string describe() const override {
    std::ostringstream os;
    os << "cuda:" << device_ << " " << device_name_ << " (sm_" << sm_ << "), cuBLAS " << gemm_.version()
       << ", compute " << (compute_ == DType::kBF16 ? "bfloat16 (f32 accumulation)" : "float32");
    return os.str();
  }
  Device device() const override { return {DeviceKind::kCuda, device_}; }

  Tensor empty(DType dtype, Shape shape) override {
    Tensor t = alloc(dtype, std::move(shape));
    if (t.bytes() > 0) DZ_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.bytes(), stream_), "empty");
    return t;
  }

  Tensor to_device(const Tensor& host) override {
    if (!host.device().is_cpu()) return host;
    Tensor t = alloc(host.dtype(), host.shape());
    if (t.bytes() > 0)
      DZ_CUDA_CHECK(cudaMemcpyAsync(t.data(), host.data(), t.bytes(), cudaMemcpyHostToDevice, stream_), "to_device");
    return t;
  }

  // Weights of rank >= 2 in the compute dtype (bf16 halves what f32 would take); norms, biases
  // and other vectors in f32, whichever float dtype the host tensor has.
  Tensor to_device_weight(const Tensor& host) override {
    if (!host.device().is_cpu() || !is_host_float(host.dtype())) return to_device(host);
    return to_device_weight(host, compute_ == DType::kBF16 && host.rank() >= 2 ? DType::kBF16 : DType::kF32);
  }

  // BF16/F16 host tensors cross PCIe as they are (wants_stored_dtype: the loader hands them so).
  bool wants_stored_dtype() const override { return true; }

  // The weight in `kept` (BF16 or F32) from a host F32, BF16 or F16 tensor: its bytes staged as
  // they are through the pinned buffers, converted on the device where the dtypes differ. The
  // conversions are exact or one rounding to bf16 (RNE) of the exact value, so the device holds
  // the same bits whether the host handed f32 or the stored dtype.
  Tensor to_device_weight(const Tensor& host, DType kept) override {
    DZ_CHECK(host.device().is_cpu() && is_host_float(host.dtype()),
             "cuda to_device_weight: expects a host f32, bf16 or f16 tensor, got " << dtype_name(host.dtype()));
    DZ_CHECK(kept == DType::kBF16 || kept == DType::kF32,
             "cuda to_device_weight: keeps weights in bfloat16 or float32, not " << dtype_name(kept));
    Tensor t = alloc(kept, host.shape(), true);
    ws_bounds_.note_weight(host.shape(), kept);
    const WeightStaging plan{host.dtype(), kept, kStagingBytes};
    const Elem from = elem_of_host(host.dtype()), to = kept == DType::kBF16 ? Elem::kBF16 : Elem::kF32;
    begin_staging();
    const size_t n = static_cast<size_t>(host.numel());
    const auto* src = static_cast<const char*>(host.data());
    auto* dst = static_cast<char*>(t.data());
    for (size_t i0 = 0, c = 0; i0 < n; i0 += plan.chunk_elems(), ++c) {
      const size_t m = std::min(plan.chunk_elems(), n - i0), b = c % 2;
      // The buffer's previous copy and conversion must be done before it is refilled; the
      // other buffer's transfer runs meanwhile.
      DZ_CUDA_CHECK(cudaEventSynchronize(staging_done_[b]), "to_device_weight");
      std::memcpy(pinned_[b], src + i0 * plan.host_size(), m * plan.host_size());
      if (plan.converts()) {
        DZ_CUDA_CHECK(cudaMemcpyAsync(staged_[b], pinned_[b], m * plan.host_size(), cudaMemcpyHostToDevice,
                                      copy_stream_),
                      "to_device_weight");
        DZ_STATUS_CHECK(kcu::convert(static_cast<int64_t>(m), from, staged_[b], to, dst + i0 * plan.kept_size(),
                                    copy_stream_));
      } else {
        DZ_CUDA_CHECK(cudaMemcpyAsync(dst + i0 * plan.kept_size(), pinned_[b], m * plan.host_size(),
                                      cudaMemcpyHostToDevice, copy_stream_),
                      "to_device_weight");
      }
      DZ_CUDA_CHECK(cudaEventRecord(staging_done_[b], copy_stream_), "to_device_weight");
    }
    end_staging();
    return t;
  }

  bool keeps_fp8_weights() const override { return true; }

  // Scales and bytes copied as they are (no conversion) into one allocation of device_bytes().
  Tensor to_device_fp8_weight(const Fp8WeightSlice& w) override {
    const BlockScaledSlice& sl = w.slice;
    DZ_CHECK(w.bytes && w.scale && w.bytes->device().is_cpu() && w.scale->device().is_cpu() && is_fp8(w.bytes->dtype()),
             "cuda to_device_fp8_weight: expects host FP8 bytes and host f32 scales");
    DZ_CHECK(w.bytes->rank() == 2 && w.bytes->dim(0) == sl.rows && w.bytes->dim(1) == sl.cols,
             "cuda to_device_fp8_weight: bytes " << shape_str(w.bytes->shape()) << " for a slice of " << sl.rows << " x "
                                                 << sl.cols);
    DZ_CHECK(w.scale->dtype() == DType::kF32 && w.scale->numel() == sl.scale_rows() * sl.scale_cols(),
             "cuda to_device_fp8_weight: scale " << shape_str(w.scale->shape()) << " for " << sl.scale_rows() << " x "
                                                 << sl.scale_cols() << " blocks");
    const size_t bytes = std::max<int64_t>(1, sl.device_bytes());
    void* p = raw_alloc(bytes, Shape{sl.rows, sl.cols});
    const Fp8Layout layout{static_cast<const float*>(p), sl, w.bytes->dtype() == DType::kF8_E5M2};
    auto st = std::make_shared<Fp8Storage>(p, bytes, device_, stream_, mem_, fp8_, layout);
    ws_bounds_.note_fp8(sl.rows, sl.cols);
    begin_staging();
    size_t c = 0;
    stage_bytes(w.scale->data(), static_cast<size_t>(sl.scale_bytes()), static_cast<char*>(p), c);
    stage_bytes(w.bytes->data(), static_cast<size_t>(sl.rows * sl.cols), static_cast<char*>(p) + sl.scale_bytes(), c);
    end_staging();
    return Tensor(w.bytes->dtype(), {sl.rows, sl.cols}, std::move(st), static_cast<size_t>(sl.scale_bytes()));
  }

  void to_host(const Tensor& src, Tensor& dst) override {
    DZ_CHECK(dst.device().is_cpu() && src.numel() == dst.numel(),
             "cuda to_host " << shape_str(src.shape()) << " -> " << shape_str(dst.shape()));
    if (src.device().is_cpu()) {
      DZ_CHECK(src.dtype() == dst.dtype());
      std::memcpy(dst.data(), src.data(), src.bytes());
      return;
    }
    if (is_fp8(src.dtype())) {
      DZ_CHECK(dst.dtype() == DType::kF32, "cuda to_host: an FP8 weight widens into f32 only");
      Tensor wide = alloc(DType::kF32, src.shape());
      dequantise(src, Elem::kF32, wide.data(), "to_host");
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst.data(), wide.data(), wide.bytes(), cudaMemcpyDeviceToHost, stream_), "to_host");
    } else if (src.dtype() == dst.dtype()) {
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToHost, stream_), "to_host");
    } else {
      DZ_CHECK(src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32,
               "cuda to_host " << dtype_name(src.dtype()) << " -> " << dtype_name(dst.dtype()));
      Tensor wide = alloc(DType::kF32, src.shape());
      DZ_STATUS_CHECK(kcu::convert(src.numel(), Elem::kBF16, src.data(), Elem::kF32, wide.data(), stream_));
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst.data(), wide.data(), wide.bytes(), cudaMemcpyDeviceToHost, stream_), "to_host");
    }
    DZ_CUDA_CHECK(cudaStreamSynchronize(stream_), "to_host");
  }

  void copy(const Tensor& src, Tensor& dst) override {
    DZ_CHECK(src.numel() == dst.numel(), "cuda copy " << shape_str(src.shape()) << " -> " << shape_str(dst.shape()));
    if (src.data() == dst.data() && src.dtype() == dst.dtype()) return;
    const bool sh = src.device().is_cpu(), dh = dst.device().is_cpu();
    if (sh || dh) {
      DZ_CHECK(src.dtype() == dst.dtype(), "cuda copy between host and device converts no dtype");
      const cudaMemcpyKind kind = sh && dh ? cudaMemcpyHostToHost : sh ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), kind, stream_), "copy");
      if (dh) DZ_CUDA_CHECK(cudaStreamSynchronize(stream_), "copy");
      return;
    }
    if (src.dtype() == dst.dtype()) {  // any dtype (i32 ids too): bytes as they are
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, stream_), "copy");
      return;
    }
    DZ_STATUS_CHECK(kcu::convert(src.numel(), elem_of(src, "copy"), src.data(), elem_of(dst, "copy"), dst.data(), stream_));
  }

  void synchronize() override { DZ_CUDA_CHECK(cudaStreamSynchronize(stream_), "synchronize"); }
  void* device_stream() const override { return stream_; }

  MemoryInfo memory_info() const override {
    size_t free_b = 0, total_b = 0;
    DZ_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "memory_info");
    return {static_cast<int64_t>(total_b), static_cast<int64_t>(free_b), mem_->peak.load(), mem_->weights.load()};
  }

  // The GEMM runs in the compute dtype where the weight allows it: a bf16 weight with compute
  // bf16 (x rounded to bf16 once per call, f32 accumulation); an FP8 weight dequantised into the
  // weight workspace in the compute dtype first; a bf16 weight under compute f32 widened there
  // (exact); an f32 weight (an f32 checkpoint kept as stored) in f32, whatever the compute dtype.
  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) override {
    DZ_CHECK(w.rank() == 2, "cuda matmul: w" << shape_str(w.shape()) << " is not a matrix");
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    DZ_CHECK(x.numel() == m * k && y.numel() == m * n,
             "cuda matmul x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y" << shape_str(y.shape()));
    const void* xa = f(x, "matmul");
    const void* wa = w.data();
    Elem ge = Elem::kF32;
    if (is_fp8(w.dtype())) {
      ge = compute_ == DType::kBF16 ? Elem::kBF16 : Elem::kF32;
      void* wd = weight_workspace(static_cast<size_t>(n * k) * elem_bytes(ge));
      dequantise(w, ge, wd, "matmul");
      wa = wd;
    } else if (elem_of(w, "matmul") == Elem::kBF16) {
      ge = compute_ == DType::kBF16 ? Elem::kBF16 : Elem::kF32;
      if (ge == Elem::kF32) {
        void* wd = weight_workspace(static_cast<size_t>(n * k) * 4);
        DZ_STATUS_CHECK(kcu::convert(n * k, Elem::kBF16, w.data(), Elem::kF32, wd, stream_));
        wa = wd;
      }
    }
    if (ge == Elem::kBF16) {
      void* xb = activation_workspace(static_cast<size_t>(x.numel()) * 2);
      DZ_STATUS_CHECK(kcu::convert(x.numel(), Elem::kF32, xa, Elem::kBF16, xb, stream_));
      xa = xb;
    }
    DZ_STATUS_CHECK(gemm_.matmul_nt(m, n, k, ge, xa, wa, f(y, "matmul"), accumulate));
  }

  Status reserve(const Reservation& r) override {
    // The GEMM workspaces at their bounds (gemm_workspace.h), allocated once.
    const GemmWorkspaceBounds::Bytes wb = ws_bounds_.bounds(r.max_tokens);
    if (wb.weight > 0) weight_workspace(static_cast<size_t>(wb.weight));
    if (wb.activation > 0) activation_workspace(static_cast<size_t>(wb.activation));
    // The caches and activations of the plan, taken from the pool once and handed back to it:
    // the pool keeps them (release threshold: never), so the KV caches and temporaries of the
    // prompts reuse this memory and the device reaches its peak here.
    const int64_t pool = r.cache_bytes + r.activation_bytes;
    if (pool <= 0) return Status::Ok();
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, static_cast<size_t>(pool), stream_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return Status::OutOfMemory(
          "backend cuda: pre-sizing from the plan needs " + std::to_string(pool >> 20) + " MiB on device " +
          std::to_string(device_) + " (KV cache and state " + std::to_string(r.cache_bytes >> 20) +
          " MiB, activations " + std::to_string(r.activation_bytes >> 20) + " MiB) beyond the " +
          std::to_string(mem_->live.load() >> 20) + " MiB held (weights " + std::to_string(mem_->weights.load() >> 20) +
          " MiB, GEMM workspaces " + std::to_string((weight_ws_bytes_ + act_ws_bytes_) >> 20) + " MiB), but " +
          std::to_string(free_b >> 20) + " MiB are free of " + std::to_string(total_b >> 20) + " MiB: " +
          cudaGetErrorString(e));
    }
    mem_->add(pool);
    DZ_RETURN_IF_ERROR(cuda_status(cudaFreeAsync(p, stream_), "cudaFreeAsync (reservation)"));
    mem_->sub(pool);
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (reservation)");
  }

  void add_bias(const Tensor& b, Tensor& y) override {
    const int64_t width = b.numel();
    DZ_CHECK(width > 0 && y.numel() % width == 0, "cuda add_bias");
    DZ_STATUS_CHECK(kcu::add_bias(y.numel() / width, width, elem_of(b, "add_bias"), b.data(), f(y, "add_bias"), stream_));
  }
  void add(const Tensor& x, Tensor& y) override {
    DZ_CHECK(x.numel() == y.numel(), "cuda add");
    DZ_STATUS_CHECK(kcu::add_inplace(x.numel(), elem_of(x, "add"), x.data(), f(y, "add"), stream_));
  }
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const int64_t width = w.numel();
    DZ_CHECK(width > 0 && x.numel() % width == 0 && x.numel() == y.numel(), "cuda rmsnorm");
    DZ_STATUS_CHECK(kcu::rmsnorm(x.numel() / width, width, f(x, "rmsnorm"), elem_of(w, "rmsnorm"), w.data(), eps,
                                f(y, "rmsnorm"), stream_));
  }
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) override {
    DZ_CHECK(x.rank() == 3 && positions.dtype() == DType::kI32 && positions.numel() == x.dim(0), "cuda rope");
    DZ_CHECK(inv_freq.numel() * 2 == x.dim(2) && !positions.device().is_cpu(), "cuda rope");
    DZ_STATUS_CHECK(kcu::rope_rotate_half(x.dim(0), x.dim(1), x.dim(2), static_cast<const int32_t*>(positions.data()),
                                         f(inv_freq, "rope"), f(x, "rope"), stream_));
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0, float scale,
                 Tensor& out) override {
    DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape(), "cuda attention");
    DZ_CHECK(pos0 + q.dim(0) <= k.dim(0), "cuda attention past the cache end");
    DZ_STATUS_CHECK(kcu::attention(q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(0), true, pos0, f(q, "attention"),
                                  f(k, "attention"), f(v, "attention"), scale, f(out, "attention"), stream_));
  }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override {
    DZ_CHECK(gate.numel() == up.numel() && up.numel() == out.numel(), "cuda swiglu");
    DZ_STATUS_CHECK(kcu::swiglu(gate.numel(), f(gate, "swiglu"), f(up, "swiglu"), f(out, "swiglu"), stream_));
  }
  void embedding(const Tensor& ids, const Tensor& table, int64_t row_offset, Tensor& out) override {
    DZ_CHECK(ids.dtype() == DType::kI32 && !ids.device().is_cpu() && out.numel() == ids.numel() * table.dim(1),
             "cuda embedding");
    DZ_STATUS_CHECK(kcu::embedding(ids.numel(), static_cast<const int32_t*>(ids.data()), table.dim(0), table.dim(1),
                                  row_offset, elem_of(table, "embedding"), table.data(), f(out, "embedding"), stream_));
  }
  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) override {
    const int64_t width = w.numel();
    DZ_CHECK(width > 0 && x.numel() % width == 0 && x.numel() == y.numel() && (!b || b->numel() == width),
             "cuda layernorm");
    const Elem we = elem_of(w, "layernorm");
    DZ_CHECK(!b || elem_of(*b, "layernorm") == we, "cuda layernorm: weight and bias dtypes differ");
    DZ_STATUS_CHECK(kcu::layernorm(x.numel() / width, width, f(x, "layernorm"), we, w.data(), b ? b->data() : nullptr,
                                  eps, f(y, "layernorm"), stream_));
  }
  void gelu(GeluKind kind, const Tensor& x, Tensor& y) override {
    DZ_CHECK(x.numel() == y.numel(), "cuda gelu");
    const int k = kind == GeluKind::kErf ? 0 : kind == GeluKind::kTanh ? 1 : 2;
    DZ_STATUS_CHECK(kcu::gelu(x.numel(), k, f(x, "gelu"), f(y, "gelu"), stream_));
  }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) override {
    DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape(), "cuda attention_full");
    DZ_CHECK(k.dim(0) == q.dim(0) && q.dim(1) % k.dim(1) == 0 && q.dim(2) == k.dim(2), "cuda attention_full");
    DZ_STATUS_CHECK(kcu::attention(q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(0), false, 0, f(q, "attention_full"),
                                  f(k, "attention_full"), f(v, "attention_full"), scale, f(out, "attention_full"),
                                  stream_));
  }
  void route_topk(const Tensor& logits, const Tensor* bias, const RouterOptions& o, Tensor& ids,
                  Tensor& weights) override {
    check_route_args(logits, bias, o, ids, weights);
    DZ_CHECK(!ids.device().is_cpu(), "cuda route_topk: host ids");
    const int64_t n = logits.dim(0), ne = logits.dim(1);
    auto* id = static_cast<int32_t*>(ids.data());
    if (o.kind == RouterOptions::Kind::kSoftmax) {
      DZ_STATUS_CHECK(kcu::route_softmax_topk(n, ne, o.k, o.renormalize, f(logits, "route_topk"), id,
                                             f(weights, "route_topk"), stream_));
      return;
    }
    DZ_STATUS_CHECK(kcu::route_sigmoid_group_topk(n, ne, o.k, o.n_group, o.topk_group, o.renormalize, o.scaling,
                                                 f(logits, "route_topk"), bias ? elem_of(*bias, "route_topk") : Elem::kF32,
                                                 bias ? bias->data() : nullptr, id, f(weights, "route_topk"), stream_));
  }

 private:
  static size_t elem_bytes(Elem e) { return e == Elem::kF32 ? 4 : 2; }

  void* raw_alloc(size_t bytes, const Shape& shape) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, stream_);
    DZ_CHECK(e == cudaSuccess, "cuda alloc of " << bytes << " bytes for " << shape_str(shape) << " on device " << device_
                                                << " (live " << mem_->live.load() << ", peak " << mem_->peak.load()
                                                << "): " << cudaGetErrorString(e));
    mem_->add(static_cast<int64_t>(bytes));
    return p;
  }

  Tensor alloc(DType dtype, Shape shape, bool weight = false) {
    const size_t bytes = std::max<size_t>(1, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
    void* p = raw_alloc(bytes, shape);
    // A weight counts its elements' bytes, as the plan does (the allocation is at least one byte).
    const int64_t counted = weight ? shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype)) : 0;
    return Tensor(dtype, std::move(shape), std::make_shared<DeviceStorage>(p, bytes, device_, stream_, mem_, counted));
  }

  // FP8 weight -> `to` in out [rows, cols] on the compute stream.
  void dequantise(const Tensor& w, Elem to, void* out, const char* op) {
    const Fp8Layout st = fp8_of(*fp8_, w, op);
    const BlockScaledSlice& sl = st.slice;
    // The scales held start at the block holding the slice's first row and column.
    DZ_STATUS_CHECK(kcu::dequant_fp8_blocks(sl.rows, sl.cols, static_cast<const uint8_t*>(w.data()), st.e5m2,
                                           st.scales, sl.scale_cols(), sl.block_rows, sl.block_cols,
                                           sl.row0 % sl.block_rows, sl.col0 % sl.block_cols, to, out, stream_));
  }

  // The copy stream waits for the compute stream's allocations; the compute stream, after the
  // copies, for the weight.
  void begin_staging() {
    DZ_CUDA_CHECK(cudaEventRecord(order_, stream_), "to_device_weight");
    DZ_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, order_, 0), "to_device_weight");
  }
  void end_staging() {
    DZ_CUDA_CHECK(cudaEventRecord(order_, copy_stream_), "to_device_weight");
    DZ_CUDA_CHECK(cudaStreamWaitEvent(stream_, order_, 0), "to_device_weight");
  }
  // bytes from host src to device dst through the pinned buffers, alternating from chunk c on.
  void stage_bytes(const void* src, size_t bytes, char* dst, size_t& c) {
    for (size_t i0 = 0; i0 < bytes; i0 += kStagingBytes, ++c) {
      const size_t m = std::min(kStagingBytes, bytes - i0), b = c % 2;
      DZ_CUDA_CHECK(cudaEventSynchronize(staging_done_[b]), "to_device_fp8_weight");
      std::memcpy(pinned_[b], static_cast<const char*>(src) + i0, m);
      DZ_CUDA_CHECK(cudaMemcpyAsync(dst + i0, pinned_[b], m, cudaMemcpyHostToDevice, copy_stream_),
                    "to_device_fp8_weight");
      DZ_CUDA_CHECK(cudaEventRecord(staging_done_[b], copy_stream_), "to_device_fp8_weight");
    }
  }

  // Scratch buffers of at least `bytes`, reused by the next call (stream order protects them).
  // reserve() sizes them at their bounds; a call beyond (a vision tower's patch rows past the
  // plan's tokens) grows them, and the growth shows in the peak.
  void* weight_workspace(size_t bytes) { return grow(weight_ws_, weight_ws_bytes_, bytes, "weight workspace"); }
  void* activation_workspace(size_t bytes) { return grow(act_ws_, act_ws_bytes_, bytes, "activation workspace"); }
  void* grow(void*& ws, size_t& have, size_t bytes, const char* what) {
    if (bytes > have) {
      if (ws) {
        DZ_CUDA_CHECK(cudaFreeAsync(ws, stream_), what);
        mem_->sub(static_cast<int64_t>(have));
      }
      DZ_CUDA_CHECK(cudaMallocAsync(&ws, bytes, stream_), what);
      have = bytes;
      mem_->add(static_cast<int64_t>(bytes));
    }
    return ws;
  }

  int device_;
  DType compute_;
  std::string device_name_;
  int sm_ = 0;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  cudaEvent_t order_ = nullptr;
  void* pinned_[2] = {nullptr, nullptr};
  void* staged_[2] = {nullptr, nullptr};
  cudaEvent_t staging_done_[2] = {nullptr, nullptr};
  void* weight_ws_ = nullptr;
  size_t weight_ws_bytes_ = 0;
  void* act_ws_ = nullptr;
  size_t act_ws_bytes_ = 0;
  GemmWorkspaceBounds ws_bounds_{compute_};  // from the weights placed
  int64_t fixed_bytes_ = 0;
  std::shared_ptr<MemCounter> mem_ = std::make_shared<MemCounter>();
  std::shared_ptr<Fp8Weights> fp8_ = std::make_shared<Fp8Weights>();
  kcu::Gemm gemm_;
};

}  // namespace

Result<int> cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  if (e != cudaSuccess) return cuda_status(e, "cudaGetDeviceCount");
  return n;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  DZ_ASSIGN_OR_RETURN(const int n, cuda_device_count());
  if (n == 0) return Status::Unsupported("backend cuda: no CUDA device is visible to this process");
  if (options.device_index < 0 || options.device_index >= n)
    return Status::InvalidArgument("backend cuda: device " + std::to_string(options.device_index) + " of " +
                                   std::to_string(n) + " visible");
  if (options.compute_dtype != DType::kBF16 && options.compute_dtype != DType::kF32)
    return Status::Unsupported(std::string("backend cuda: compute dtype ") + dtype_name(options.compute_dtype) +
                               " (bfloat16 or float32)");
  DZ_RETURN_IF_ERROR(cuda_status(cudaSetDevice(options.device_index), "cudaSetDevice"));
  // The plan's bytes against what the device has free now, before this backend allocates.
  if (options.required_bytes > 0) {
    size_t free_b = 0, total_b = 0;
    DZ_RETURN_IF_ERROR(cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
    if (static_cast<uint64_t>(options.required_bytes) > free_b)
      return Status::InvalidArgument(
          "backend cuda: the plan needs " + std::to_string(options.required_bytes >> 20) + " MiB on device " +
          std::to_string(options.device_index) + ", which has " + std::to_string(free_b >> 20) + " MiB free of " +
          std::to_string(total_b >> 20) + " MiB; use more ranks (tp/pp) or a smaller topology.memory_fraction");
  }
  auto be = std::make_unique<CudaBackend>(options);
  DZ_RETURN_IF_ERROR(be->init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace dayzero::backend

#endif  // DAYZERO_WITH_CUDA
