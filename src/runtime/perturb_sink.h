// PerturbSink: the debug.perturb hook (tests only). Wraps the activation sink of a forward pass
// (or none) and multiplies one named dump point by a scale where it is produced, before the
// wrapped sink copies it, so the dump shows the scaled tensor and every later layer inherits
// it. Every rank of the replica applies it (the tensor at a dump point is the whole logical
// tensor on each tp rank), so the ranks stay consistent. Not a sink of its own.
#pragma once

#include <string>

#include "backend/backend.h"
#include "model/activation_sink.h"

namespace dayzero::runtime {

class PerturbSink final : public model::ActivationSink {
 public:
  // inner may be null (a rank or phase that dumps nothing).
  PerturbSink(backend::Backend& be, std::string point, double scale, model::ActivationSink* inner)
      : be_(be), point_(std::move(point)), scale_(scale), inner_(inner) {}

  bool wants(const std::string& name) const override;
  // Scales t in place when name is the point, then hands it to the inner sink if it wants it.
  void put(const std::string& name, const Tensor& t) override;

 private:
  backend::Backend& be_;
  std::string point_;
  double scale_;
  model::ActivationSink* inner_;
};

}  // namespace dayzero::runtime
