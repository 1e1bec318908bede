// debug.perturb (perturb_sink.h): a host round trip, device-agnostic, for tests only.
#include "runtime/perturb_sink.h"

namespace dayzero::runtime {

bool PerturbSink::wants(const std::string& name) const {
  return name == point_ || (inner_ && inner_->wants(name));
}

void PerturbSink::put(const std::string& name, const Tensor& t) {
  if (name == point_) {
    Tensor host = Tensor::host(t.dtype(), t.shape());
    be_.to_host(t, host);
    float* v = host.f32();
    for (int64_t i = 0, n = host.numel(); i < n; ++i) v[i] = static_cast<float>(v[i] * scale_);
    // t is a view of the producer's buffer: writing through a copy of the view scales the tensor
    // the forward pass goes on with.
    Tensor dst = t;
    be_.copy(be_.to_device(host), dst);
  }
  if (inner_ && inner_->wants(name)) inner_->put(name, t);
}

}  // namespace dayzero::runtime
