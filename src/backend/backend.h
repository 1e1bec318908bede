// Backend: where tensors live and how ops run on them. The CPU backend (cpu_backend.cpp) is
// the reference; a CUDA backend implements the same interface with device pointers and one
// stream per backend, so callers (model blocks, forward, runner) never change. Ops are
// enqueued in call order; synchronize() waits for all of them (a no-op on CPU); to_host()
// returns data that is complete.
// Not a tensor library: only the ops the model blocks need, all contiguous, activations f32.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/device_memory.h"
#include "core/stored_weight.h"
#include "core/status.h"
#include "core/tensor.h"

namespace dayzero::backend {

struct MemoryInfo {
  int64_t total_bytes = 0;  // what this rank may use (CUDA: device memory; CPU: configured budget)
  int64_t free_bytes = 0;
  int64_t peak_bytes = 0;   // peak of this process so far (CPU: peak RSS)
  // Bytes of the weights placed so far and still live (to_device_weight, to_device_stored):
  // CUDA: their device allocations, which equal what the plan counted (plan::held_bytes);
  // CPU: 0 (the CPU's weights are the loader's tensors; their bytes() and weight_scale_bytes
  // make what the plan counted).
  int64_t weight_bytes = 0;
  // CPU: what the weights kept as stored (to_device_stored) hold beside their elements: scales,
  // a global scale, the rest of each row's last unit, which those tensors' bytes() (one byte,
  // half a byte an element) do not count. CUDA: 0 (in weight_bytes).
  int64_t weight_scale_bytes = 0;
};

// What the backend pre-sizes before the first prompt (reserve): from the plan, so that the
// device reaches its peak at start and a plan that does not fit fails there.
struct Reservation {
  int64_t max_tokens = 0;    // rows of the largest forward call (plan: context tokens x batch)
  int64_t cache_bytes = 0;   // the plan's KV cache and linear-attention state of this rank
  int64_t activation_bytes = 0;  // the plan's activations of one forward on this rank
};

// The GELU family: erf (nn.GELU()), tanh approximation (gelu_pytorch_tanh), quick_gelu
// (x * sigmoid(1.702 x)).
enum class GeluKind { kErf, kTanh, kQuick };

// MoE router top-k (route_topk). kSoftmax: softmax top-k, optional renormalisation (Mixtral,
// Qwen3-MoE). kSigmoidGrouped: sigmoid scores, a score-correction bias that steers selection
// only, group-limited top-k, weights from the unbiased scores (renormalised when asked) times
// scaling (DeepSeek-V3, Kimi-K2, GLM). Arithmetic and the tie rule (equal scores: the lower
// index first) are kernels/cpu/router.h's on every backend.
struct RouterOptions {
  enum class Kind { kSoftmax, kSigmoidGrouped };
  Kind kind = Kind::kSoftmax;
  int64_t k = 1;                        // experts per token
  bool renormalize = false;
  int64_t n_group = 1, topk_group = 1;  // kSigmoidGrouped only
  float scaling = 1.0f;                 // kSigmoidGrouped only
};
// The contract of route_topk's arguments (shapes, dtypes, group sizes), checked by every backend.
void check_route_args(const Tensor& logits, const Tensor* bias, const RouterOptions& o, const Tensor& ids,
                      const Tensor& weights);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;      // "cpu" | "cuda"
  virtual std::string describe() const = 0;  // e.g. "cpu: openblas 0.3.21 SkylakeX, 2 threads"
  virtual Device device() const = 0;

  // A zero-filled tensor on this backend's device.
  virtual Tensor empty(DType dtype, Shape shape) = 0;
  // A tensor the next op writes in full before anything reads it (the output of matmul without
  // accumulate, rmsnorm, attention, embedding): its contents are unspecified where a backend
  // skips the fill (the CPU backend does); by default it is empty().
  virtual Tensor empty_output(DType dtype, Shape shape) { return empty(dtype, std::move(shape)); }
  // A device copy of a host tensor (the CPU backend may return the same storage).
  virtual Tensor to_device(const Tensor& host) = 0;
  // A device copy of a loaded weight, in the dtype the backend keeps weights in: the CPU
  // backend keeps f32 (to_device); the CUDA backend keeps weights of rank >= 2 in its compute
  // dtype (bf16 by default; matmul, embedding, add and to_host accept them) and vectors in f32.
  virtual Tensor to_device_weight(const Tensor& host) { return to_device(host); }
  // The same, in the dtype the plan counts for it (plan::kept_dtype: BF16 or F32): the CUDA
  // backend keeps the weight in exactly that dtype, whatever its rank and the compute dtype
  // (matmul converts into its workspace where they differ); the CPU backend keeps f32.
  virtual Tensor to_device_weight(const Tensor& host, DType kept) {
    (void)kept;
    return to_device_weight(host);
  }
  // Whether to_device_weight takes BF16 and F16 host tensors as stored and converts them on
  // the device (CUDA: they cross PCIe at two bytes an element); otherwise the loader hands every
  // float tensor over as host f32 (checkpoint::Loader::set_keep_stored_float). Either way the
  // device holds the same bits.
  virtual bool wants_stored_dtype() const { return false; }
  // Whether to_device_stored keeps weights of `scheme` as stored (CUDA: fp8-block, mxfp4, nvfp4;
  // the CPU with cpu_keeps_stored: every row of the table); otherwise the loader dequantises them
  // on the host and calls to_device_weight.
  virtual bool keeps_stored(StoredScheme scheme) const {
    (void)scheme;
    return false;
  }
  // A weight holding the slice's values, its scales and its global scale in one allocation of the
  // bytes the plan counts (StoredSlice::held_bytes): dtype w.held_dtype(), shape [rows, cols].
  // matmul dequantises it (CUDA: into a workspace just before its GEMM; CPU: inside its small-M
  // GEMM, in panels above); to_host dequantises it. A slice whose tensors are not the ones its
  // StoredSlice describes (StoredWeightSlice::shape_error) is a bug and stops the process.
  // REQUIRES: keeps_stored(w.slice.format->scheme).
  virtual Tensor to_device_stored(const StoredWeightSlice& w);
  // Pre-sizes the caches and workspaces from the plan (CUDA: the stream-ordered pool holds
  // cache_bytes + activation_bytes from now on, the GEMM workspaces take their bounds from the
  // weights placed so far and max_tokens). Call after the weights are placed. OutOfMemory with
  // the numbers when the device cannot hold it; the CPU backend has nothing to reserve.
  virtual Status reserve(const Reservation& r) {
    (void)r;
    return Status::Ok();
  }
  // Copies a device tensor into a host tensor of the same dtype and numel (or a bf16 weight
  // into an f32 host tensor, widened); complete on return.
  virtual void to_host(const Tensor& src, Tensor& host_dst) = 0;
  // dst = src, same device, same numel.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void synchronize() = 0;
  virtual MemoryInfo memory_info() const = 0;
  // The stream this backend's ops are enqueued on (CUDA: its cudaStream_t), for a device comm
  // that must order its collectives with them; nullptr for the CPU backend.
  virtual void* device_stream() const { return nullptr; }

  // Tunes the kernels on the weights this backend holds, after loading (CPU: the small-M GEMM's
  // tile width and prefetch distance, timed at m = 1 within about 0.2 s and cached under
  // cache_dir when it is not empty; every candidate gives the same bits). Returns what was
  // chosen and measured, for the log and describe(); "" when there is nothing to tune.
  virtual std::string tune(const std::vector<const Tensor*>& weights, const std::string& cache_dir) {
    (void)weights;
    (void)cache_dir;
    return "";
  }
  // Times the prefill GEMM paths on the weights' shapes (CPU: the large-M path, OpenBLAS / BLIS /
  // oneDNN / built-in, within about 0.1 s, cached under cache_dir) and takes the fastest. Unlike
  // tune(), the paths differ in bits: a job times on one rank and hands the id it returns in
  // *chosen to the others' use_prefill_path. Returns what was chosen and measured; "" (and
  // *chosen "") when there is nothing to choose.
  virtual std::string tune_prefill(const std::vector<const Tensor*>& weights, const std::string& cache_dir,
                                   std::string* chosen) {
    (void)weights;
    (void)cache_dir;
    chosen->clear();
    return "";
  }
  // Takes the prefill GEMM path another rank's tune_prefill chose. An error names the path when
  // this process cannot run it.
  virtual Status use_prefill_path(const std::string& id) {
    return id.empty() ? Status::Ok() : Status::InvalidArgument("backend has no prefill GEMM path '" + id + "'");
  }

  // y[m, n] = x[m, k] · w[n, k]^T (+ y when accumulate)
  virtual void matmul(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate = false) = 0;
  // ys[i] = x · ws[i]^T for every i: the products of one input (q, k and v; gate and up), the
  // results of a matmul call each. A backend may run them as one op (the CPU: one parallel loop
  // over all their columns at decode batch sizes, one wait for its threads instead of one per
  // product); by default, matmul for each.
  virtual void matmul_shared_x(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys) {
    for (size_t i = 0; i < ws.size(); ++i) matmul(x, *ws[i], *ys[i]);
  }
  // y[rows, width] += b[width]
  virtual void add_bias(const Tensor& b, Tensor& y) = 0;
  // y = x + y, elementwise, same numel
  virtual void add(const Tensor& x, Tensor& y) = 0;
  // y[rows, width] = rmsnorm(x[rows, width]) * w[width]; rows = numel / width
  virtual void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) = 0;
  // residual += delta, then y = rmsnorm(residual) * w (a pre-norm layer's residual add and the
  // next norm): the result of add then rmsnorm; a backend may do both in one pass.
  virtual void add_rmsnorm(const Tensor& delta, Tensor& residual, const Tensor& w, float eps, Tensor& y) {
    add(delta, residual);
    rmsnorm(residual, w, eps, y);
  }
  // x[n_tokens, n_head, head_dim] rotated in place (rotate-half); positions int32 [n_tokens];
  // inv_freq f32 [head_dim / 2]
  virtual void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) = 0;
  // out[n_tokens, n_head, head_dim] = causal GQA attention of q over cache rows [0, pos0 + n_tokens)
  // of k/v [n_ctx, n_head_kv, head_dim]
  virtual void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0,
                         float scale, Tensor& out) = 0;
  // out = silu(gate) * up, elementwise
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // out[n_tokens, width] = table[ids[t] - row_offset, :] for ids inside the table's rows
  // [row_offset, row_offset + rows), zero rows for the others (a vocabulary-parallel shard).
  // ids int32 [n_tokens].
  virtual void embedding(const Tensor& ids, const Tensor& table, int64_t row_offset, Tensor& out) = 0;
  // Vision encoders. y[rows, width] = layernorm(x[rows, width]) * w[width] + b[width] (b may
  // be null: no bias); rows = numel / width.
  virtual void layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) = 0;
  // y = gelu(x) elementwise (kind: erf, tanh approximation, quick_gelu); y may be x.
  virtual void gelu(GeluKind kind, const Tensor& x, Tensor& y) = 0;
  // out[n_tokens, n_head, head_dim] = bidirectional attention of q over k/v
  // [n_tokens, n_head_kv, head_dim] (no mask, no cache: an encoder's self-attention).
  virtual void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) = 0;
  // MoE routing: ids int32 [n_tokens, o.k] and weights f32 [n_tokens, o.k] (this backend's
  // tensors) from router logits f32 [n_tokens, n_expert]; bias [n_expert] (kSigmoidGrouped
  // only, may be null; f32, or bf16 on CUDA). Ids are in selection order (RouterOptions).
  // The CPU backend runs kernels/cpu/router.h, the CUDA backend its twin on the device
  // (kernels/cuda/router.cu), one block per token.
  virtual void route_topk(const Tensor& logits, const Tensor* bias, const RouterOptions& o, Tensor& ids,
                          Tensor& weights) = 0;
};

struct BackendOptions {
  std::string kind = "cpu";       // cpu | cuda
  int threads = 0;                // CPU GEMM threads; 0 = cores of this node / ranks on this node
  int64_t memory_budget_bytes = 0;  // CPU: per-rank budget reported as total; 0 = physical memory
  int device_index = 0;           // CUDA: which visible device
  DType compute_dtype = DType::kF32;  // CUDA: GEMM input dtype, kBF16 (f32 accumulation) or kF32
  int64_t required_bytes = 0;     // CUDA: the plan's bytes for this rank, checked with
                                  // device_overhead against the device's free memory before
                                  // anything is allocated (0: no check; device_memory.h)
  DeviceOverhead device_overhead;  // CUDA: what the backend holds beyond the plan
  bool cpu_keeps_stored = false;  // CPU: BF16/F16 weights handed over as stored (weights kept in
                                  // bf16 where the plan counts bf16) and block-scaled FP8 weights
                                  // kept as stored; otherwise every weight is f32
};

// The PCI bus id of visible CUDA device `device` ("0000:1b:00.0"): it names the physical GPU
// whatever CUDA_VISIBLE_DEVICES renumbers. Unsupported without CUDA.
Result<std::string> cuda_pci_bus_id(int device);

// CUDA devices visible to this process: 0 when none is (or when CUDA is not built in); an
// error only when the runtime fails otherwise.
Result<int> cuda_device_count();
bool cuda_built();

// Creates a backend; Unsupported when the kind is not built or no device is visible.
Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);

}  // namespace dayzero::backend
