// Splitting a batch's dump points by sequence.
#include "runtime/batch_sink.h"

#include "core/check.h"

namespace dayzero::runtime {

BatchSink::BatchSink(std::vector<Part> parts) : parts_(std::move(parts)) {
  for (const Part& p : parts_) {
    DZ_CHECK(p.row0 == rows_ && p.n_rows > 0, "batch sink parts must tile the rows in order");
    rows_ += p.n_rows;
  }
}

bool BatchSink::wants(const std::string& name) const {
  for (const Part& p : parts_)
    if (p.sink && p.sink->wants(name)) return true;
  return false;
}

bool BatchSink::any() const {
  for (const Part& p : parts_)
    if (p.sink) return true;
  return false;
}

void BatchSink::put(const std::string& name, const Tensor& t) {
  const int64_t rows = t.dim(0), n_parts = static_cast<int64_t>(parts_.size());
  DZ_CHECK(rows == rows_ || rows == n_parts,
           name << ": " << rows << " rows for a batch of " << rows_ << " rows in " << n_parts << " sequences");
  const bool per_row = rows == rows_;
  for (int64_t i = 0; i < n_parts; ++i) {
    const Part& p = parts_[static_cast<size_t>(i)];
    if (!p.sink || !p.sink->wants(name)) continue;
    if (per_row) p.sink->put(name, t.rows(p.row0, p.row0 + p.n_rows));
    else p.sink->put(name, t.rows(i, i + 1));
  }
}

}  // namespace dayzero::runtime
