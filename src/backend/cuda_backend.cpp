// The CUDA backend: device tensors on one GPU, ops from kernels/cuda on one compute stream,
// GEMMs through cuBLAS (bf16 inputs, f32 accumulation; f32 on request), weights staged to the
// device through pinned double buffers on a copy stream and converted there. Activations are
// f32 on the device (the Backend contract); weights are kept in the dtype the plan counted
// (FP8 with its block scales, bf16 or f32), converted per GEMM into a bounded workspace where
// that differs from the compute dtype. Compiled only when the toolkit is found
// (DAYZERO_WITH_CUDA); not the NCCL comm.
// The class and the shared helpers are in cuda_backend_internal.h; the ops in cuda_backend_ops.cpp.
#ifdef DAYZERO_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "backend/backend.h"
#include "backend/cuda_backend_internal.h"
#include "backend/device_memory.h"
#include "backend/gemm_workspace.h"
#include "backend/weight_staging.h"
#include "core/log.h"
#include "kernels/cuda/ops.h"

namespace dayzero::backend::cuda_internal {
namespace {

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  const std::string m = "cuda " + what + ": " + cudaGetErrorString(e);
  return e == cudaErrorMemoryAllocation ? Status::OutOfMemory(m) : Status::Internal(m);
}

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

// Registers its layout in HeldWeights (cuda_backend_internal.h) while it lives; counts
// held_bytes as weight bytes.
class HeldStorage final : public DeviceStorage {
 public:
  HeldStorage(void* p, size_t bytes, int device, cudaStream_t stream, std::shared_ptr<MemCounter> counter,
                std::shared_ptr<HeldWeights> registry, const HeldLayout& layout)
      : DeviceStorage(p, bytes, device, stream, std::move(counter), layout.slice.held_bytes()),
        registry_(std::move(registry)),
        key_(static_cast<const char*>(p) + layout.slice.scale_bytes()) {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_values[key_] = layout;
  }
  ~HeldStorage() override {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->by_values.erase(key_);
  }

 private:
  std::shared_ptr<HeldWeights> registry_;
  const void* key_;
};

bool is_host_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }
Elem elem_of_host(DType t) { return t == DType::kF32 ? Elem::kF32 : t == DType::kBF16 ? Elem::kBF16 : Elem::kF16; }

constexpr size_t kStagingBytes = static_cast<size_t>(kCudaStagingBufferBytes);  // per buffer; two of them

}  // namespace

Status CudaBackend::init() {
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

CudaBackend::~CudaBackend() {
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

std::string CudaBackend::describe() const {
  std::ostringstream os;
  os << "cuda:" << device_ << " " << device_name_ << " (sm_" << sm_ << "), cuBLAS " << gemm_.version()
     << ", compute " << (compute_ == DType::kBF16 ? "bfloat16 (f32 accumulation)" : "float32");
  return os.str();
}

Tensor CudaBackend::empty(DType dtype, Shape shape) {
  Tensor t = alloc(dtype, std::move(shape));
  if (t.bytes() > 0) DZ_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.bytes(), stream_), "empty");
  return t;
}

Tensor CudaBackend::to_device(const Tensor& host) {
  if (!host.device().is_cpu()) return host;
  Tensor t = alloc(host.dtype(), host.shape());
  if (t.bytes() > 0)
    DZ_CUDA_CHECK(cudaMemcpyAsync(t.data(), host.data(), t.bytes(), cudaMemcpyHostToDevice, stream_), "to_device");
  return t;
}

// Weights of rank >= 2 in the compute dtype (bf16 halves what f32 would take); norms, biases
// and other vectors in f32, whichever float dtype the host tensor has.
Tensor CudaBackend::to_device_weight(const Tensor& host) {
  if (!host.device().is_cpu() || !is_host_float(host.dtype())) return to_device(host);
  return to_device_weight(host, compute_ == DType::kBF16 && host.rank() >= 2 ? DType::kBF16 : DType::kF32);
}

// The weight in `kept` (BF16 or F32) from a host F32, BF16 or F16 tensor: its bytes staged as
// they are through the pinned buffers, converted on the device where the dtypes differ. The
// conversions are exact or one rounding to bf16 (RNE) of the exact value, so the device holds
// the same bits whether the host handed f32 or the stored dtype.
Tensor CudaBackend::to_device_weight(const Tensor& host, DType kept) {
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

// Scales, values and the global scale copied as they are (no conversion) into one allocation of
// the table's held_bytes (what the plan counts).
Tensor CudaBackend::to_device_stored(const StoredWeightSlice& w) {
  const std::string bad = w.shape_error();
  DZ_CHECK(bad.empty() && w.values.device().is_cpu() && w.scale.device().is_cpu() &&
               keeps_stored(w.slice.format->scheme),
           "cuda to_device_stored: " << (bad.empty() ? "a scheme without a CUDA kernel, or device tensors" : bad));
  const StoredSlice& sl = w.slice;
  const bool empty = sl.rows <= 0 || sl.cols <= 0;
  const size_t bytes = std::max<int64_t>(1, sl.held_bytes());
  void* p = raw_alloc(bytes, Shape{sl.rows, sl.cols});
  HeldLayout layout{p, sl, empty ? 0 : w.values.dim(1), w.values.dtype() == DType::kF8_E5M2, w.global_scale};
  auto st = std::make_shared<HeldStorage>(p, bytes, device_, stream_, mem_, stored_, layout);
  ws_bounds_.note_stored(sl.rows, sl.cols);
  if (!empty) {
    const size_t scale_bytes = w.scale.bytes(), q_bytes = w.values.bytes();
    begin_staging();
    size_t c = 0;
    stage_bytes(w.scale.data(), scale_bytes, static_cast<char*>(p), c);
    stage_bytes(w.values.data(), q_bytes, static_cast<char*>(p) + scale_bytes, c);
    if (sl.format->global_scale_bytes && bytes >= scale_bytes + q_bytes + 4)
      stage_bytes(&w.global_scale, 4, static_cast<char*>(p) + scale_bytes + q_bytes, c);
    end_staging();
  }
  return Tensor(w.held_dtype(), {sl.rows, sl.cols}, std::move(st), static_cast<size_t>(sl.scale_bytes()));
}

void CudaBackend::to_host(const Tensor& src, Tensor& dst) {
  DZ_CHECK(dst.device().is_cpu() && src.numel() == dst.numel(),
           "cuda to_host " << shape_str(src.shape()) << " -> " << shape_str(dst.shape()));
  if (src.device().is_cpu()) {
    DZ_CHECK(src.dtype() == dst.dtype());
    std::memcpy(dst.data(), src.data(), src.bytes());
    return;
  }
  if (is_dequantised_per_gemm(src.dtype())) {
    DZ_CHECK(dst.dtype() == DType::kF32, "cuda to_host: a weight kept as stored widens into f32 only");
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

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
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

MemoryInfo CudaBackend::memory_info() const {
  size_t free_b = 0, total_b = 0;
  DZ_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "memory_info");
  return {static_cast<int64_t>(total_b), static_cast<int64_t>(free_b), mem_->peak.load(), mem_->weights.load()};
}

Status CudaBackend::reserve(const Reservation& r) {
  // The GEMM workspaces at their bounds (gemm_workspace.h), allocated once, then the caches and
  // activations of the plan, taken from the pool once and handed back to it: the pool keeps
  // them (release threshold: never), so the KV caches and temporaries of the prompts reuse this
  // memory and the device reaches its peak here. Running out at any of the three is the one
  // OutOfMemory sentence below (exit 3), not a CHECK.
  const GemmWorkspaceBounds::Bytes wb = ws_bounds_.bounds(r.max_tokens);
  const int64_t pool = std::max<int64_t>(0, r.cache_bytes + r.activation_bytes);
  const auto out_of_memory = [&](const char* what, cudaError_t e) {
    cudaGetLastError();  // the failed allocation must not be read by the next launch check
    size_t free_b = 0, total_b = 0;
    const cudaError_t info = cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    const std::string free_s = info == cudaSuccess ? std::to_string(free_b >> 20) + " MiB are free of " +
                                                         std::to_string(total_b >> 20) + " MiB"
                                                   : std::string("the free memory is unknown (cudaMemGetInfo: ") +
                                                         cudaGetErrorString(info) + ")";
    return Status::OutOfMemory(
        "backend cuda: pre-sizing from the plan needs " + std::to_string(pool >> 20) + " MiB on device " +
        std::to_string(device_) + " (KV cache and state " + std::to_string(r.cache_bytes >> 20) +
        " MiB, activations " + std::to_string(r.activation_bytes >> 20) + " MiB) and GEMM workspaces of " +
        std::to_string((wb.weight + wb.activation) >> 20) + " MiB beyond the " +
        std::to_string(mem_->live.load() >> 20) + " MiB held (weights " + std::to_string(mem_->weights.load() >> 20) +
        " MiB, GEMM workspaces " + std::to_string((weight_ws_bytes_ + act_ws_bytes_) >> 20) + " MiB), but " + free_s +
        ": the " + what + " failed: " + cudaGetErrorString(e));
  };
  cudaError_t e = cudaSuccess;
  if (wb.weight > 0 && (e = try_grow(weight_ws_, weight_ws_bytes_, static_cast<size_t>(wb.weight))) != cudaSuccess)
    return out_of_memory("weight workspace", e);
  if (wb.activation > 0 &&
      (e = try_grow(act_ws_, act_ws_bytes_, static_cast<size_t>(wb.activation))) != cudaSuccess)
    return out_of_memory("activation workspace", e);
  if (pool <= 0) return Status::Ok();
  void* p = nullptr;
  e = cudaMallocAsync(&p, static_cast<size_t>(pool), stream_);
  if (e != cudaSuccess) return out_of_memory("KV cache and activations", e);
  mem_->add(pool);
  DZ_RETURN_IF_ERROR(cuda_status(cudaFreeAsync(p, stream_), "cudaFreeAsync (reservation)"));
  mem_->sub(pool);
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (reservation)");
}

void* CudaBackend::raw_alloc(size_t bytes, const Shape& shape) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes, stream_);
  DZ_CHECK(e == cudaSuccess, "cuda alloc of " << bytes << " bytes for " << shape_str(shape) << " on device " << device_
                                              << " (live " << mem_->live.load() << ", peak " << mem_->peak.load()
                                              << "): " << cudaGetErrorString(e));
  mem_->add(static_cast<int64_t>(bytes));
  return p;
}

Tensor CudaBackend::alloc(DType dtype, Shape shape, bool weight) {
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  void* p = raw_alloc(bytes, shape);
  // A weight counts its elements' bytes, as the plan does (the allocation is at least one byte).
  const int64_t counted = weight ? shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype)) : 0;
  return Tensor(dtype, std::move(shape), std::make_shared<DeviceStorage>(p, bytes, device_, stream_, mem_, counted));
}

// The copy stream waits for the compute stream's allocations; the compute stream, after the
// copies, for the weight.
void CudaBackend::begin_staging() {
  DZ_CUDA_CHECK(cudaEventRecord(order_, stream_), "to_device_weight");
  DZ_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, order_, 0), "to_device_weight");
}

void CudaBackend::end_staging() {
  DZ_CUDA_CHECK(cudaEventRecord(order_, copy_stream_), "to_device_weight");
  DZ_CUDA_CHECK(cudaStreamWaitEvent(stream_, order_, 0), "to_device_weight");
}

// bytes from host src to device dst through the pinned buffers, alternating from chunk c on.
void CudaBackend::stage_bytes(const void* src, size_t bytes, char* dst, size_t& c) {
  for (size_t i0 = 0; i0 < bytes; i0 += kStagingBytes, ++c) {
    const size_t m = std::min(kStagingBytes, bytes - i0), b = c % 2;
    DZ_CUDA_CHECK(cudaEventSynchronize(staging_done_[b]), "to_device_stored");
    std::memcpy(pinned_[b], static_cast<const char*>(src) + i0, m);
    DZ_CUDA_CHECK(cudaMemcpyAsync(dst + i0, pinned_[b], m, cudaMemcpyHostToDevice, copy_stream_),
                  "to_device_stored");
    DZ_CUDA_CHECK(cudaEventRecord(staging_done_[b], copy_stream_), "to_device_stored");
  }
}

cudaError_t CudaBackend::try_grow(void*& ws, size_t& have, size_t bytes) {
  if (bytes <= have) return cudaSuccess;
  if (ws) {
    const cudaError_t e = cudaFreeAsync(ws, stream_);
    if (e != cudaSuccess) return e;
    mem_->sub(static_cast<int64_t>(have));
    ws = nullptr;
    have = 0;
  }
  const cudaError_t e = cudaMallocAsync(&ws, bytes, stream_);
  if (e != cudaSuccess) {
    ws = nullptr;
    return e;
  }
  have = bytes;
  mem_->add(static_cast<int64_t>(bytes));
  return cudaSuccess;
}

void* CudaBackend::grow(void*& ws, size_t& have, size_t bytes, const char* what) {
  DZ_CUDA_CHECK(try_grow(ws, have, bytes), what);
  return ws;
}

}  // namespace dayzero::backend::cuda_internal

namespace dayzero::backend {

Result<int> cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  if (e != cudaSuccess) return cuda_internal::cuda_status(e, "cudaGetDeviceCount");
  return n;
}

Result<std::string> cuda_pci_bus_id(int device) {
  char bus[32] = {};
  DZ_RETURN_IF_ERROR(cuda_internal::cuda_status(cudaDeviceGetPCIBusId(bus, sizeof bus, device),
                                                "cudaDeviceGetPCIBusId(" + std::to_string(device) + ")"));
  return std::string(bus);
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
  DZ_RETURN_IF_ERROR(cuda_internal::cuda_status(cudaSetDevice(options.device_index), "cudaSetDevice"));
  // The plan's bytes and what the backend holds beyond them (device_memory.h) against what the
  // device has free now, before this backend allocates.
  if (options.required_bytes > 0) {
    size_t free_b = 0, total_b = 0;
    DZ_RETURN_IF_ERROR(cuda_internal::cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
    DZ_RETURN_IF_ERROR(check_device_fit(options.required_bytes, options.device_overhead, options.device_index,
                                        static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)));
  }
  auto be = std::make_unique<cuda_internal::CudaBackend>(options);
  DZ_RETURN_IF_ERROR(be->init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace dayzero::backend

#endif  // DAYZERO_WITH_CUDA
