// BatchSink: the activation sink of a batched forward call. It splits each stacked tensor of
// the batch by sequence and hands every sequence's rows to that sequence's own sink, so a
// batch writes exactly what its sequences run one at a time would. Not a writer itself.
#pragma once

#include <vector>

#include "model/activation_sink.h"

namespace dayzero::runtime {

class BatchSink final : public model::ActivationSink {
 public:
  struct Part {
    int64_t row0 = 0, n_rows = 0;        // the sequence's rows of the batch
    model::ActivationSink* sink = nullptr;  // may be null: that sequence dumps nothing
  };
  // parts in row order, tiling [0, rows) of the batch.
  explicit BatchSink(std::vector<Part> parts);

  // True when any sequence's sink wants the name.
  bool wants(const std::string& name) const override;
  // t is [rows, width] (all rows of the batch) or [n_parts, width] (one row per sequence, as
  // the logits of each sequence's last token); each part's sink gets its rows.
  void put(const std::string& name, const Tensor& t) override;
  // Whether any part has a sink.
  bool any() const;

 private:
  std::vector<Part> parts_;
  int64_t rows_ = 0;
};

}  // namespace dayzero::runtime
