// Helpers every block file uses: a layer's tensor name from its template, a host copy of a
// backend tensor (for the steps still computed on the host).
#pragma once

#include <string>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/tensor_spec.h"

namespace dayzero::model::blocks {

inline std::string L(const std::string& tmpl, int layer) { return layer_tensor_name(tmpl, layer); }

inline Tensor host_copy(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::host(DType::kF32, t.shape());
  be.to_host(t, h);
  return h;
}

}  // namespace dayzero::model::blocks
