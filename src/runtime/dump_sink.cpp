// Writing activations as they are produced.
#include "runtime/dump_sink.h"

#include "dump/schema.h"

namespace dayzero::runtime {

bool DumpSink::wants(const std::string& name) const { return status_.ok() && sel_.wants_key(name); }

void DumpSink::put(const std::string& name, const Tensor& t) {
  if (!status_.ok()) return;
  const int64_t width = t.dim(-1), rows = t.numel() / width;
  Tensor host = Tensor::host(DType::kF32, {rows, width});
  be_.to_host(t, host);
  const bool decode = phase_ == dump::kPhaseDecode;
  Status s;
  if (sel_.mode == config::DumpMode::kStats) {
    s = writer_.write_activation_stats(prompt_id_, phase_, name, host.f32(), host.numel());
  } else if (decode) {
    for (int64_t r = 0; r < rows && s.ok(); ++r)
      s = writer_.append_activation_row(prompt_id_, phase_, name, host.f32() + r * width, width);
  } else {
    s = writer_.write_activation(prompt_id_, phase_, name, host.f32(), rows, width);
  }
  if (!s.ok()) status_ = s;
}

}  // namespace dayzero::runtime
