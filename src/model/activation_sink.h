// Ask-then-copy collection of named intermediates: blocks ask wants(name) before producing a
// copy, so dump points that nobody asked for cost nothing. Names use the one dump vocabulary:
// embed, layers.{L}.attn_norm|attn_out|ffn_norm|ffn_out|layer_out, final_norm, logits.
#pragma once

#include <string>

#include "core/tensor.h"

namespace dayzero::model {

class ActivationSink {
 public:
  virtual ~ActivationSink() = default;
  virtual bool wants(const std::string& name) const = 0;
  // t is [rows, width] (the logical tensor) on the backend's device; the sink copies what it keeps.
  virtual void put(const std::string& name, const Tensor& t) = 0;
};

inline void emit(ActivationSink* sink, const std::string& name, const Tensor& t) {
  if (sink && sink->wants(name)) sink->put(name, t);
}

}  // namespace dayzero::model
