// Private to the CUDA backend: its class and the helpers both halves use, shared so each .cpp stays under 600 lines.
#pragma once
#ifdef DAYZERO_WITH_CUDA

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/gemm_workspace.h"
#include "core/log.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace dayzero::backend::cuda_internal {

namespace kcu = kernels::cuda;
using kcu::Elem;

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

// A weight kept as stored (fp8-block, mxfp4, nvfp4): one allocation of its slice's held_bytes
// (the plan's count), the scales first, then each row's values [rows, row_bytes], then the 4-byte
// global scale (NVFP4); the tensor views the values. The backend finds the layout of a weight it
// is handed by the address of its values (Tensor carries no layout): HeldWeights maps it while
// the storage lives.
struct HeldLayout {
  const void* scales = nullptr;  // f32 (fp8-block) or the scale bytes (FP4)
  StoredSlice slice;
  int64_t row_bytes = 0;
  bool e5m2 = false;
  float global_scale = 1.0f;
};
struct HeldWeights {
  std::mutex mu;
  std::unordered_map<const void*, HeldLayout> by_values;
};

inline Elem elem_of(const Tensor& t, const char* op) {
  DZ_CHECK(!t.device().is_cpu(), "cuda " << op << ": a host tensor " << shape_str(t.shape()) << " was passed");
  if (t.dtype() == DType::kF32) return Elem::kF32;
  DZ_CHECK(t.dtype() == DType::kBF16, "cuda " << op << ": dtype " << dtype_name(t.dtype()) << " not supported");
  return Elem::kBF16;
}

// A weight kept as stored, which matmul dequantises first.
inline bool is_dequantised_per_gemm(DType t) { return is_stored_weight_dtype(t); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o) : device_(o.device_index), compute_(o.compute_dtype) {}

  // Device setup, memory and transfers: cuda_backend.cpp.
  Status init();
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  std::string describe() const override;
  Device device() const override { return {DeviceKind::kCuda, device_}; }

  Tensor empty(DType dtype, Shape shape) override;
  Tensor to_device(const Tensor& host) override;
  Tensor to_device_weight(const Tensor& host) override;
  // BF16/F16 host tensors cross PCIe as they are (wants_stored_dtype: the loader hands them so).
  bool wants_stored_dtype() const override { return true; }
  Tensor to_device_weight(const Tensor& host, DType kept) override;
  // FP8 and FP4 weights as stored, dequantised per GEMM; INT4 has no CUDA kernel (dequantised on load).
  bool keeps_stored(StoredScheme scheme) const override { return scheme != StoredScheme::kInt4Group; }
  Tensor to_device_stored(const StoredWeightSlice& w) override;
  void to_host(const Tensor& src, Tensor& dst) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override { DZ_CUDA_CHECK(cudaStreamSynchronize(stream_), "synchronize"); }
  void* device_stream() const override { return stream_; }
  MemoryInfo memory_info() const override;
  Status reserve(const Reservation& r) override;

  // The ops: cuda_backend_ops.cpp.
  void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) override;
  void add_bias(const Tensor& b, Tensor& y) override;
  void add(const Tensor& x, Tensor& y) override;
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override;
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0, float scale,
                 Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void embedding(const Tensor& ids, const Tensor& table, int64_t row_offset, Tensor& out) override;
  void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) override;
  void gelu(GeluKind kind, const Tensor& x, Tensor& y) override;
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) override;
  void route_topk(const Tensor& logits, const Tensor* bias, const RouterOptions& o, Tensor& ids,
                  Tensor& weights) override;

 private:
  static size_t elem_bytes(Elem e) { return e == Elem::kF32 ? 4 : 2; }

  void* raw_alloc(size_t bytes, const Shape& shape);
  Tensor alloc(DType dtype, Shape shape, bool weight = false);
  // FP8 or FP4 weight -> `to` in out [rows, cols] on the compute stream (cuda_backend_ops.cpp).
  void dequantise(const Tensor& w, Elem to, void* out, const char* op);
  // The copy stream waits for the compute stream's allocations; the compute stream, after the
  // copies, for the weight.
  void begin_staging();
  void end_staging();
  // bytes from host src to device dst through the pinned buffers, alternating from chunk c on.
  void stage_bytes(const void* src, size_t bytes, char* dst, size_t& c);

  // Scratch buffers of at least `bytes`, reused by the next call (stream order protects them).
  // reserve() sizes them at their bounds; a call beyond (a vision tower's patch rows past the
  // plan's tokens) grows them, and the growth shows in the peak.
  void* weight_workspace(size_t bytes) { return grow(weight_ws_, weight_ws_bytes_, bytes, "weight workspace"); }
  void* activation_workspace(size_t bytes) { return grow(act_ws_, act_ws_bytes_, bytes, "activation workspace"); }
  void* grow(void*& ws, size_t& have, size_t bytes, const char* what);  // aborts when out of memory
  cudaError_t try_grow(void*& ws, size_t& have, size_t bytes);           // reserve(): the error returned

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
  std::shared_ptr<HeldWeights> stored_ = std::make_shared<HeldWeights>();
  kcu::Gemm gemm_;
};

}  // namespace dayzero::backend::cuda_internal

#endif  // DAYZERO_WITH_CUDA
