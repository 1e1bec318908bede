// DumpSink: the activation sink that writes the selected dump points of one prompt and phase
// to this rank's HDF5 file (full tensors or stats; decode steps append rows).
#pragma once

#include <string>

#include "config/run_config.h"
#include "dump/dump_writer.h"
#include "model/activation_sink.h"
#include "backend/backend.h"

namespace dayzero::runtime {

class DumpSink final : public model::ActivationSink {
 public:
  DumpSink(dump::DumpWriter& writer, backend::Backend& be, const config::DumpSelection& selection, std::string prompt_id,
           std::string phase)
      : writer_(writer), be_(be), sel_(selection), prompt_id_(std::move(prompt_id)), phase_(std::move(phase)) {}

  bool wants(const std::string& name) const override;
  void put(const std::string& name, const Tensor& t) override;
  // The first write error, if any (put cannot return one).
  const Status& status() const { return status_; }

 private:
  dump::DumpWriter& writer_;
  backend::Backend& be_;
  const config::DumpSelection& sel_;
  std::string prompt_id_, phase_;
  Status status_;
};

}  // namespace dayzero::runtime
