// A Comm built on another Comm of the same group: its identity (rank, size, name, label) and the
// small host-side collectives (barrier, max of ints, argmax) are the inner Comm's, so a derived
// class writes only how it moves tensors. NcclComm derives from it over its MpiComm, StagedComm
// over any Comm.
#pragma once

#include <cstdint>
#include <string>

#include "comm/comm.h"

namespace dayzero::comm {

class ForwardingComm : public Comm {
 public:
  // inner is not owned and must outlive this Comm.
  explicit ForwardingComm(Comm& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  const std::string& label() const override { return inner_.label(); }
  Status barrier() override { return inner_.barrier(); }
  Status all_reduce_max_int(int64_t* v, int n) override { return inner_.all_reduce_max_int(v, n); }
  Status argmax_across(float value, int64_t index, float* best_value, int64_t* best_index) override {
    return inner_.argmax_across(value, index, best_value, best_index);
  }

 protected:
  Comm& inner_;
};

}  // namespace dayzero::comm
