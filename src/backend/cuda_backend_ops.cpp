// The CUDA backend's compute ops (GEMM, norms, attention, routing): apart from its memory and transfers, under 600 lines.
#ifdef DAYZERO_WITH_CUDA

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda_backend_internal.h"
#include "core/log.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace dayzero::backend::cuda_internal {
namespace {

// The layout of the weight kept as stored a tensor views, whole. A view into part of one (rows())
// cannot be dequantised with its scales and is refused.
HeldLayout stored_of(HeldWeights& reg, const Tensor& w, const char* op) {
  std::lock_guard<std::mutex> lock(reg.mu);
  const auto it = reg.by_values.find(w.data());
  DZ_CHECK(it != reg.by_values.end(), "cuda " << op << ": a " << dtype_name(w.dtype()) << " tensor "
                                              << shape_str(w.shape())
                                              << " that is not a whole weight of this backend kept as stored");
  DZ_CHECK(w.numel() == it->second.slice.rows * it->second.slice.cols,
           "cuda " << op << ": a weight of " << it->second.slice.rows << " x " << it->second.slice.cols
                   << " kept as stored viewed as " << shape_str(w.shape()));
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

}  // namespace

// The GEMM runs in the compute dtype where the weight allows it: a bf16 weight with compute
// bf16 (x rounded to bf16 once per call, f32 accumulation); an FP8 weight dequantised into the
// weight workspace in the compute dtype first; a bf16 weight under compute f32 widened there
// (exact); an f32 weight (an f32 checkpoint kept as stored) in f32, whatever the compute dtype.
void CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  DZ_CHECK(w.rank() == 2, "cuda matmul: w" << shape_str(w.shape()) << " is not a matrix");
  const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
  DZ_CHECK(x.numel() == m * k && y.numel() == m * n,
           "cuda matmul x" << shape_str(x.shape()) << " w" << shape_str(w.shape()) << " y" << shape_str(y.shape()));
  if (m == 0) return;  // no rows (an expert no token chose): nothing to compute, as on the CPU
  const void* xa = f(x, "matmul");
  const void* wa = w.data();
  Elem ge = Elem::kF32;
  if (is_dequantised_per_gemm(w.dtype())) {
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

void CudaBackend::add_bias(const Tensor& b, Tensor& y) {
  const int64_t width = b.numel();
  DZ_CHECK(width > 0 && y.numel() % width == 0, "cuda add_bias");
  DZ_STATUS_CHECK(kcu::add_bias(y.numel() / width, width, elem_of(b, "add_bias"), b.data(), f(y, "add_bias"), stream_));
}

void CudaBackend::add(const Tensor& x, Tensor& y) {
  DZ_CHECK(x.numel() == y.numel(), "cuda add");
  DZ_STATUS_CHECK(kcu::add_inplace(x.numel(), elem_of(x, "add"), x.data(), f(y, "add"), stream_));
}

void CudaBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  const int64_t width = w.numel();
  DZ_CHECK(width > 0 && x.numel() % width == 0 && x.numel() == y.numel(), "cuda rmsnorm");
  DZ_STATUS_CHECK(kcu::rmsnorm(x.numel() / width, width, f(x, "rmsnorm"), elem_of(w, "rmsnorm"), w.data(), eps,
                              f(y, "rmsnorm"), stream_));
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  DZ_CHECK(x.rank() == 3 && positions.dtype() == DType::kI32 && positions.numel() == x.dim(0), "cuda rope");
  DZ_CHECK(inv_freq.numel() * 2 == x.dim(2) && !positions.device().is_cpu(), "cuda rope");
  DZ_STATUS_CHECK(kcu::rope_rotate_half(x.dim(0), x.dim(1), x.dim(2), static_cast<const int32_t*>(positions.data()),
                                       f(inv_freq, "rope"), f(x, "rope"), stream_));
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0, float scale,
                            Tensor& out) {
  DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape(), "cuda attention");
  DZ_CHECK(pos0 + q.dim(0) <= k.dim(0), "cuda attention past the cache end");
  DZ_STATUS_CHECK(kcu::attention(q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(0), true, pos0, f(q, "attention"),
                                f(k, "attention"), f(v, "attention"), scale, f(out, "attention"), stream_));
}

void CudaBackend::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  DZ_CHECK(gate.numel() == up.numel() && up.numel() == out.numel(), "cuda swiglu");
  DZ_STATUS_CHECK(kcu::swiglu(gate.numel(), f(gate, "swiglu"), f(up, "swiglu"), f(out, "swiglu"), stream_));
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, int64_t row_offset, Tensor& out) {
  DZ_CHECK(ids.dtype() == DType::kI32 && !ids.device().is_cpu() && out.numel() == ids.numel() * table.dim(1),
           "cuda embedding");
  DZ_STATUS_CHECK(kcu::embedding(ids.numel(), static_cast<const int32_t*>(ids.data()), table.dim(0), table.dim(1),
                                row_offset, elem_of(table, "embedding"), table.data(), f(out, "embedding"), stream_));
}

void CudaBackend::layernorm(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y) {
  const int64_t width = w.numel();
  DZ_CHECK(width > 0 && x.numel() % width == 0 && x.numel() == y.numel() && (!b || b->numel() == width),
           "cuda layernorm");
  const Elem we = elem_of(w, "layernorm");
  DZ_CHECK(!b || elem_of(*b, "layernorm") == we, "cuda layernorm: weight and bias dtypes differ");
  DZ_STATUS_CHECK(kcu::layernorm(x.numel() / width, width, f(x, "layernorm"), we, w.data(), b ? b->data() : nullptr,
                                eps, f(y, "layernorm"), stream_));
}

void CudaBackend::gelu(GeluKind kind, const Tensor& x, Tensor& y) {
  DZ_CHECK(x.numel() == y.numel(), "cuda gelu");
  const int k = kind == GeluKind::kErf ? 0 : kind == GeluKind::kTanh ? 1 : 2;
  DZ_STATUS_CHECK(kcu::gelu(x.numel(), k, f(x, "gelu"), f(y, "gelu"), stream_));
}

void CudaBackend::attention_full(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out) {
  DZ_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && out.shape() == q.shape(), "cuda attention_full");
  DZ_CHECK(k.dim(0) == q.dim(0) && q.dim(1) % k.dim(1) == 0 && q.dim(2) == k.dim(2), "cuda attention_full");
  DZ_STATUS_CHECK(kcu::attention(q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(0), false, 0, f(q, "attention_full"),
                                f(k, "attention_full"), f(v, "attention_full"), scale, f(out, "attention_full"),
                                stream_));
}

void CudaBackend::route_topk(const Tensor& logits, const Tensor* bias, const RouterOptions& o, Tensor& ids,
                             Tensor& weights) {
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

// A weight kept as stored -> `to` in out [rows, cols] on the compute stream: its scheme's
// dequantise kernel (kernels/cuda/ops.h), the scales held starting at the block of the slice's
// first row and column.
void CudaBackend::dequantise(const Tensor& w, Elem to, void* out, const char* op) {
  const HeldLayout l = stored_of(*stored_, w, op);
  const StoredSlice& sl = l.slice;
  const auto* q = static_cast<const uint8_t*>(w.data());
  switch (sl.format->scheme) {
    case StoredScheme::kFp8Block:
      DZ_STATUS_CHECK(kcu::dequant_fp8_blocks(sl.rows, sl.cols, q, l.e5m2, static_cast<const float*>(l.scales),
                                             sl.scale_cols(), sl.block_rows, sl.block_cols, sl.row0 % sl.block_rows,
                                             sl.col0 % sl.block_cols, to, out, stream_));
      return;
    case StoredScheme::kMxfp4:
    case StoredScheme::kNvfp4:
      DZ_STATUS_CHECK(kcu::dequant_fp4_groups(sl.rows, sl.cols, q, l.row_bytes, static_cast<const uint8_t*>(l.scales),
                                             sl.scale_cols(), sl.block_cols, sl.col0 % sl.block_cols,
                                             sl.format->scale == ScaleKind::kE4M3, l.global_scale, to, out, stream_));
      return;
    case StoredScheme::kInt4Group: break;
  }
  DZ_CHECK(false, "cuda " << op << ": no CUDA dequantisation of " << sl.format->name);
}

}  // namespace dayzero::backend::cuda_internal

#endif  // DAYZERO_WITH_CUDA
