// RMSNorm weights with the optional (1 + w) offset (norm.h).
#include "model/blocks/norm.h"

namespace dayzero::model::blocks {

Tensor rms_weight(backend::Backend& be, const HParams& hp, const Tensor& w) {
  if (!hp.norm_weight_offset) return w;
  Tensor host = Tensor::host(DType::kF32, w.shape());
  be.to_host(w, host);
  for (int64_t i = 0; i < host.numel(); ++i) host.f32()[i] += 1.0f;
  return be.to_device(host);
}

void rms_norm(backend::Backend& be, const HParams& hp, const Tensor& x, const Tensor& w, Tensor& y) {
  be.rmsnorm(x, rms_weight(be, hp, w), static_cast<float>(hp.rms_eps), y);
}

}  // namespace dayzero::model::blocks
